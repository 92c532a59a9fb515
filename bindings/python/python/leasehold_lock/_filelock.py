"""``FileLock``: filelock's interface over leasehold's kernel leases.

``from leasehold_lock import FileLock, Timeout`` replaces ``from filelock import FileLock,
Timeout``. What is kept from filelock, in its documented meaning: the constructor, the
timeout rules (negative: no limit, ``0``: one try, ``blocking=False``: one try whatever the
timeout), re-entrancy by a counter, ``acquire()`` returning a proxy for ``with
lock.acquire(...)``, ``release(force=...)``, the ``is_locked``, ``lock_counter``,
``lock_file``, ``timeout`` and ``blocking`` attributes, per-thread holds (``thread_local``),
``is_singleton``, use as a decorator, and :class:`~leasehold_lock.Timeout` with ``lock_file``.

What differs, on purpose: a wait is a kernel wait (no polling, so ``poll_interval`` is
accepted and ignored, and waiters are served fairly and at once); a symbolic link, FIFO or
directory at the lock path is refused with ``LeaseError(code='INVALID_INPUT')``; the lock file
is never deleted; and the lock file is created with mode 0600 whatever ``mode`` says (the
library's rule: a file others may write could be replaced under a holder).

Only the counters live here; taking and releasing the lease is ``leasehold_lock.acquire`` and
``Lease.release``.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
import weakref
from types import TracebackType
from typing import Any, ClassVar, Optional, Type, TypeVar, Union

from . import _native
from ._errors import Timeout

__all__ = ["AcquireReturnProxy", "FileLock"]

_Lock = TypeVar("_Lock", bound="FileLock")


class AcquireReturnProxy:
    """What :meth:`FileLock.acquire` returns: entering it does not acquire again, leaving it
    releases once (so ``with lock.acquire(timeout=1):`` holds one level)."""

    def __init__(self, lock: FileLock) -> None:
        self.lock = lock

    def __enter__(self) -> FileLock:
        return self.lock

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.lock.release()


class _Hold:
    """One holder's state: the lease and how many levels of it are held."""

    def __init__(self) -> None:
        self.lease: Optional[_native.Lease] = None
        self.counter = 0


class _ThreadHold(_Hold, threading.local):
    """A hold per thread (``thread_local=True``)."""


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must not be NaN")
    return value


def _budget(timeout: float, blocking: bool) -> Optional[float]:
    """filelock's timeout rules in leasehold_lock.acquire's terms (None: no limit, 0: one try)."""
    if not blocking:
        return 0.0
    if timeout < 0 or math.isinf(timeout):
        return None
    return timeout


class FileLock(contextlib.ContextDecorator):
    """A re-entrant, kernel-arbitrated lock on ``lock_file`` with filelock's interface.

    :param lock_file: the lock file's path (created 0600 if missing, never deleted)
    :param timeout: default wait in seconds for :meth:`acquire`; negative waits without limit
    :param mode: accepted for compatibility; lock files are always created 0600
    :param thread_local: each thread holds its own levels (``False``: one count shared by
        every thread of the process, so another thread may release what one acquired)
    :param blocking: default for :meth:`acquire`; ``False`` makes each acquire one try
    :param is_singleton: return the same instance for the same path (raising ``ValueError``
        when it was made with other arguments), so that re-entrancy spans every user of it
    """

    _instances: ClassVar[weakref.WeakValueDictionary[str, FileLock]] = weakref.WeakValueDictionary()
    _instances_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._instances = weakref.WeakValueDictionary()
        cls._instances_lock = threading.Lock()

    def __new__(
        cls: Type[_Lock],
        lock_file: Union[str, os.PathLike[str]],
        timeout: float = -1,
        mode: int = 0o600,
        thread_local: bool = True,
        *,
        blocking: bool = True,
        is_singleton: bool = False,
    ) -> _Lock:
        timeout = _seconds("timeout", timeout)
        if not is_singleton:
            lock = super().__new__(cls)
            lock._setup(lock_file, timeout, mode, thread_local, blocking, False)
            return lock
        key = os.path.realpath(os.fspath(lock_file))
        with cls._instances_lock:
            existing = cls._instances.get(key)
            if existing is None:
                lock = super().__new__(cls)
                lock._setup(lock_file, timeout, mode, thread_local, blocking, True)
                cls._instances[key] = lock
                return lock
        existing._check_same(timeout, mode, thread_local, blocking)
        return existing  # type: ignore[return-value]

    def __init__(
        self,
        lock_file: Union[str, os.PathLike[str]],
        timeout: float = -1,
        mode: int = 0o600,
        thread_local: bool = True,
        *,
        blocking: bool = True,
        is_singleton: bool = False,
    ) -> None:
        # Everything was set up by __new__ (once, even for a singleton handed out again).
        pass

    def _setup(
        self,
        lock_file: Union[str, os.PathLike[str]],
        timeout: float,
        mode: int,
        thread_local: bool,
        blocking: bool,
        is_singleton: bool,
    ) -> None:
        self._lock_file = os.fspath(lock_file)
        self._timeout = timeout
        self._mode = mode
        self._thread_local = bool(thread_local)
        self._blocking = bool(blocking)
        self._is_singleton = is_singleton
        self._hold: _Hold = _ThreadHold() if self._thread_local else _Hold()
        # Shared holds only: `_state` guards the counter (never held while waiting), and
        # `_first` lets one thread at a time wait for the lease itself.
        self._state = threading.Lock()
        self._first = threading.Lock()

    def _check_same(self, timeout: float, mode: int, thread_local: bool, blocking: bool) -> None:
        def same_timeout(a: float, b: float) -> bool:
            return a == b or (a < 0 and b < 0)

        mismatches = [
            f"{name} (existing lock has {have!r} but {want!r} was passed)"
            for name, have, want, same in [
                ("timeout", self._timeout, timeout, same_timeout(self._timeout, timeout)),
                ("mode", self._mode, mode, self._mode == mode),
                ("thread_local", self._thread_local, bool(thread_local), self._thread_local == bool(thread_local)),
                ("blocking", self._blocking, bool(blocking), self._blocking == bool(blocking)),
            ]
            if not same
        ]
        if mismatches:
            raise ValueError(
                "Singleton lock instances cannot be initialized with differing arguments; "
                "non-matching arguments: " + "; ".join(mismatches)
            )

    @property
    def lock_file(self) -> str:
        """The lock file's path."""
        return self._lock_file

    @property
    def timeout(self) -> float:
        """The default wait of :meth:`acquire`, in seconds (negative: no limit)."""
        return self._timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self._timeout = _seconds("timeout", value)

    @property
    def blocking(self) -> bool:
        """Whether :meth:`acquire` waits by default (``False``: one try)."""
        return self._blocking

    @blocking.setter
    def blocking(self, value: bool) -> None:
        self._blocking = bool(value)

    @property
    def mode(self) -> int:
        """The mode given to the constructor (lock files are created 0600 regardless)."""
        return self._mode

    @property
    def is_singleton(self) -> bool:
        """Whether this instance is shared by everyone who asks for its path."""
        return self._is_singleton

    def is_thread_local(self) -> bool:
        """Whether each thread holds its own levels."""
        return self._thread_local

    @property
    def is_locked(self) -> bool:
        """Whether this instance holds the lock (for this thread, when thread-local)."""
        return self._hold.lease is not None

    @property
    def lock_counter(self) -> int:
        """How many levels are held (acquired and not yet released)."""
        return self._hold.counter

    def acquire(
        self,
        timeout: Optional[float] = None,
        poll_interval: float = 0.05,
        *,
        blocking: Optional[bool] = None,
    ) -> AcquireReturnProxy:
        """Takes one more level of the lock, waiting for the lease if this holder has none.

        :param timeout: seconds to wait (``None``: this lock's :attr:`timeout`; negative: no
            limit; ``0``: one try)
        :param poll_interval: ignored: waits are kernel waits, woken at the release
        :param blocking: ``False`` makes one try (``None``: this lock's :attr:`blocking`)
        :raises Timeout: the lock could not be had in time
        :returns: a proxy whose ``with`` block releases this level on exit
        """
        wait = self._timeout if timeout is None else _seconds("timeout", timeout)
        budget = _budget(wait, self._blocking if blocking is None else blocking)
        hold = self._hold
        if self._thread_local:
            if hold.lease is None:
                hold.lease = _native.acquire(self._lock_file, budget)
            hold.counter += 1
            return AcquireReturnProxy(self)
        if self._again(hold):
            return AcquireReturnProxy(self)
        deadline = None if budget is None else time.monotonic() + budget
        if not self._first.acquire(timeout=-1 if budget is None else budget):
            raise Timeout(self._lock_file)
        try:
            if self._again(hold):
                return AcquireReturnProxy(self)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            lease = _native.acquire(self._lock_file, left)
            with self._state:
                hold.lease = lease
                hold.counter = 1
        finally:
            self._first.release()
        return AcquireReturnProxy(self)

    def _again(self, hold: _Hold) -> bool:
        """One more level of a shared hold that already has the lease."""
        with self._state:
            if hold.lease is None:
                return False
            hold.counter += 1
            return True

    def release(self, force: bool = False) -> None:
        """Releases one level (``force``: all of them); the last one releases the lease.
        Releasing a lock that is not held does nothing."""
        hold = self._hold
        with self._state:
            lease = hold.lease
            if lease is None:
                return
            hold.counter = 0 if force else hold.counter - 1
            if hold.counter > 0:
                return
            hold.lease = None
        lease.release()

    def __enter__(self: _Lock) -> _Lock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = f"locked x{self.lock_counter}" if self.is_locked else "unlocked"
        return f"<leasehold_lock.FileLock {self._lock_file!r} {state}>"
