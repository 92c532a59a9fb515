"""``FileLock``, ``AsyncFileLock`` and ``ReadWriteLock``: filelock's interface over leasehold's
kernel leases.

``from leasehold_lock import FileLock, Timeout`` replaces ``from filelock import FileLock,
Timeout``. What is kept from filelock, in its documented meaning: the constructor and every
keyword of it and of ``acquire`` (checked as filelock checks them), the timeout rules
(negative or ``inf``: no limit, ``0``: one try, ``blocking=False``: one try whatever the
timeout), re-entrancy by a counter, ``acquire()`` returning a proxy for ``with
lock.acquire(...)``, ``release(force=...)``, per-thread holds and settings
(``thread_local``), ``is_singleton``, subclasses with constructors of their own, use as a
decorator, the ``filelock`` logger's debug lines, the same-thread deadlock error,
``on_acquired``, ``cancel_check``, ``mode`` for a lock file it creates, and
:class:`~leasehold_lock.Timeout` with filelock's message and ``lock_file``.

Like filelock (and ``flock(1)``), a ``FileLock`` locks the file its caller names even when
another user owns it or may write it (the library's ``allow_shared_state``); the rest of
the package keeps the library's ownership rule.

What differs, on purpose (the package README, "Switching from filelock", lists each with the
test that pins it): a wait is a kernel wait (``poll_interval`` only paces ``cancel_check``);
a symbolic link, FIFO, socket or device at the lock path is refused with
``LeaseError(code='INVALID_INPUT')``; the lock file is never deleted or truncated, and one that
exists keeps its mode; there is no soft (existence-file) lock, so ``lifetime`` and
``fallback_to_soft`` have nothing to act on; one class serves every platform; the path is
opened as given at each attempt (no directory is pinned); a release calls no Python code
before it is done; and a kernel file lease on the lock file is an error, not a wait.

Only the counters live here; taking and releasing the lease is the native ``acquire`` and
``Lease.release``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import errno
import inspect
import logging
import math
import os
import stat
import threading
import time
import warnings
import weakref
from decimal import Decimal
from numbers import Real
from types import TracebackType
from typing import Any, Callable, ClassVar, Dict, Optional, Set, Tuple, Type, TypeVar, Union

from . import _native
from ._errors import LeaseError, Timeout

__all__ = ["AcquireReturnProxy", "AsyncAcquireReturnProxy", "AsyncFileLock", "FileLock", "ReadWriteLock"]

_LOGGER = logging.getLogger("filelock")
_Lock = TypeVar("_Lock", bound="FileLock")

#: ``mode`` not given: a created lock file gets 0666 less the umask, as filelock's.
_UNSET_FILE_MODE = -1
_CONTEXT_ERROR_POLICIES = ("chain", "group")
_CLOSE_ERROR_POLICIES = ("default", "raise", "suppress")


# --- argument checks (filelock's rules and messages) ------------------------------------


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (Real, Decimal)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if isinstance(value, Decimal) and value.is_snan():
        return math.nan
    try:
        seconds = float(value)
    except OverflowError:
        raise ValueError(f"{name} is too large to be a number of seconds: {value!r}") from None
    # float() rounds a tiny negative to -0.0, which would read as "one try".
    return -math.ulp(0.0) if seconds == 0 and value < 0 else seconds


def _poll_interval(value: Any) -> float:
    seconds = _seconds("poll_interval", value)
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"poll_interval must be finite and non-negative, not {seconds!r}")
    if seconds > threading.TIMEOUT_MAX:
        raise ValueError(
            f"poll_interval must not exceed threading.TIMEOUT_MAX ({threading.TIMEOUT_MAX}), got {seconds!r}"
        )
    return seconds


def _check_blocking(value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"blocking must be a bool, not {type(value).__name__}")


def _check_mode(mode: Any, cls_name: str) -> None:
    if mode == _UNSET_FILE_MODE and not isinstance(mode, bool):
        return
    if isinstance(mode, bool) or not isinstance(mode, int):
        raise TypeError(f"mode must be an int, not {type(mode).__name__}")
    if not 0 <= mode <= 0o777:
        raise ValueError(f"mode={mode:#o} must be within 0o000-0o777 for {cls_name}")
    if ~mode & (stat.S_IRUSR | stat.S_IWUSR):
        raise ValueError(f"mode={mode:#o} must grant the owner read and write for {cls_name}")


def _lifetime(value: Any, cls_name: str, stacklevel: int) -> None:
    """``lifetime`` is checked and dropped: a kernel lock cannot be broken by age."""
    if value is None:
        return
    seconds = value if isinstance(value, int) and not isinstance(value, bool) else _seconds("lifetime", value)
    if seconds < 0 or (isinstance(seconds, float) and not math.isfinite(seconds)):
        raise ValueError(f"lifetime must be finite and non-negative, not {seconds!r}")
    warnings.warn(
        f"lifetime is ignored for {cls_name}: a native OS lock cannot be broken safely by file age; "
        "only SoftFileLock supports lifetime-based expiry",
        stacklevel=stacklevel,
    )


def _timeout_for_acquire(timeout: Any, blocking: bool) -> float:
    seconds = _seconds("timeout", timeout)
    if math.isnan(seconds) and blocking:
        raise ValueError("timeout must be a number of seconds, not nan")
    return -1.0 if seconds == math.inf else seconds


def _budget(timeout: float, blocking: bool) -> Optional[float]:
    """filelock's timeout rules in the native acquire's terms (None: no limit, 0: one try)."""
    if not blocking:
        return 0.0
    return None if timeout < 0 else timeout


def _same_wait(a: float, b: float) -> bool:
    def norm(t: float) -> Any:
        if math.isnan(t):
            return "nan"
        return -1.0 if t == math.inf or t < 0 else t

    return norm(a) == norm(b)


def _canonical(path: str) -> str:
    """One key per lock file for singletons and the deadlock check: the parent directory
    resolved, the last component as written (a final symlink stays a key of its own)."""
    parent, name = os.path.split(path)
    return os.path.join(os.path.realpath(parent or os.curdir), name)


def _check_path(path: str) -> None:
    """The errors ``os.open`` gives for a path no file can have (filelock raises them)."""
    if "\0" in path:
        raise ValueError("embedded null byte")
    if not path:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


class _IsADirectory(LeaseError, IsADirectoryError):
    """A directory at a lock path: the library's refusal (``code='INVALID_INPUT'``), also the
    ``IsADirectoryError`` (``errno.EISDIR``) filelock raises for it."""


class _NotFound(LeaseError, FileNotFoundError):
    """A lock path whose directory is gone: the library's error, also the
    ``FileNotFoundError`` (``errno.ENOENT``) filelock raises for it."""


def _filelock_error(err: LeaseError, path: str) -> BaseException:
    """The library's refusal of a path as filelock's exception class too, where filelock has
    one; otherwise the library's error itself."""
    if err.code == "INVALID_INPUT" and os.path.isdir(path):
        mapped = _IsADirectory(str(err), code=err.code, path=err.path)
        mapped.errno = errno.EISDIR
        mapped.strerror = os.strerror(errno.EISDIR)
        return mapped
    if err.code == "IO" and not os.path.isdir(os.path.dirname(os.path.abspath(path)) or "."):
        gone = _NotFound(str(err), code=err.code, path=err.path)
        gone.errno = errno.ENOENT
        gone.strerror = os.strerror(errno.ENOENT)
        return gone
    return err


# --- the state of one holder -----------------------------------------------------------


class _Context:
    """One holder's settings and hold (``thread_local=True``: one per thread, each starting
    from the constructor's arguments, as filelock's)."""

    def __init__(
        self, lock_file: str, timeout: float, mode: int, blocking: bool, poll_interval: float
    ) -> None:
        self.lock_file = lock_file
        self.timeout = timeout
        self.mode = mode
        self.blocking = blocking
        self.poll_interval = poll_interval
        self.lease: Optional[Any] = None
        self.counter = 0
        self.holder_thread: Optional[int] = None


class _ThreadContext(_Context, threading.local):
    pass


#: Which instances hold which lock file, per thread (for the same-thread deadlock check).
_held: Dict[Tuple[Any, str], Set[int]] = {}
_held_lock = threading.Lock()


class AcquireReturnProxy:
    """What :meth:`FileLock.acquire` returns: entering it does not acquire again, leaving it
    releases once (so ``with lock.acquire(timeout=1):`` holds one level)."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock

    def __enter__(self) -> Any:
        return self.lock

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.lock.release()


def _init_params(cls: type) -> Tuple[frozenset, bool]:
    """The keywords ``cls.__init__`` takes, and whether it takes ``**kwargs``."""
    params = inspect.signature(cls.__init__).parameters.values()
    named = frozenset(
        p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )
    return named, any(p.kind is p.VAR_KEYWORD for p in params)


_DEFAULTS: Dict[str, Any] = {
    "timeout": -1,
    "mode": _UNSET_FILE_MODE,
    "thread_local": True,
    "blocking": True,
    "is_singleton": False,
    "poll_interval": 0.05,
    "lifetime": None,
    "context_error_policy": "chain",
    "close_error_policy": "default",
    "fallback_to_soft": True,
    "preserve_lock_file": False,
    "on_acquired": None,
}


class _FileLockMeta(type):
    """Checks the constructor's arguments before an instance exists, hands a singleton out
    again (without running ``__init__`` again), and passes a subclass's ``__init__`` only the
    keywords it takes, as filelock's metaclass does."""

    def __call__(  # type: ignore[override]
        cls,
        lock_file: Union[str, "os.PathLike[str]"],
        timeout: float = -1,
        mode: int = _UNSET_FILE_MODE,
        thread_local: bool = True,
        *,
        blocking: bool = True,
        is_singleton: bool = False,
        poll_interval: float = 0.05,
        lifetime: Optional[float] = None,
        context_error_policy: str = "chain",
        close_error_policy: str = "default",
        fallback_to_soft: bool = True,
        preserve_lock_file: bool = False,
        on_acquired: Optional[Callable[[int], None]] = None,
        **kwargs: Any,
    ) -> Any:
        _lifetime(lifetime, cls.__name__, stacklevel=3)
        poll_interval = _poll_interval(poll_interval)
        _check_blocking(blocking)
        timeout = _seconds("timeout", timeout)
        _check_mode(mode, cls.__name__)
        if context_error_policy not in _CONTEXT_ERROR_POLICIES:
            raise ValueError(f"context_error_policy must be 'chain' or 'group', got {context_error_policy!r}")
        if close_error_policy not in _CLOSE_ERROR_POLICIES:
            raise ValueError(
                f"close_error_policy must be 'default', 'raise', or 'suppress', got {close_error_policy!r}"
            )
        if on_acquired is not None and not callable(on_acquired):
            raise TypeError(f"on_acquired must be callable or None, not {type(on_acquired).__name__}")
        params: Dict[str, Any] = {
            "timeout": timeout,
            "mode": mode,
            "thread_local": thread_local,
            "blocking": blocking,
            "is_singleton": is_singleton,
            "poll_interval": poll_interval,
            "lifetime": None,
            "context_error_policy": context_error_policy,
            "close_error_policy": close_error_policy,
            "fallback_to_soft": fallback_to_soft,
            "preserve_lock_file": preserve_lock_file,
            "on_acquired": on_acquired,
            **kwargs,
        }
        named, any_keyword = _init_params(cls)
        if not any_keyword:
            unsupported = sorted(
                name
                for name, value in params.items()
                if name not in named and (name not in _DEFAULTS or value != _DEFAULTS[name])
            )
            if unsupported:
                raise TypeError(
                    f"{cls.__name__} does not support non-default lock options: {', '.join(unsupported)}"
                )
            params = {name: value for name, value in params.items() if name in named}
        if not is_singleton:
            return super().__call__(lock_file, **params)
        key = _canonical(os.fspath(lock_file))
        with cls._instances_lock:  # type: ignore[attr-defined]
            instance = cls._instances.get(key)  # type: ignore[attr-defined]
            if instance is None:
                instance = super().__call__(lock_file, **params)
                cls._instances[key] = instance  # type: ignore[attr-defined]
                return instance
        mismatches = {
            name: (str(passed), str(have))
            for name, (passed, have, same) in {
                "thread_local": (thread_local, instance.is_thread_local(), None),
                "timeout": (timeout, instance.timeout, _same_wait(timeout, instance.timeout)),
                "mode": (mode, instance._context.mode, None),
                "blocking": (blocking, instance.blocking, None),
                "poll_interval": (poll_interval, instance.poll_interval, None),
                "context_error_policy": (context_error_policy, instance.context_error_policy, None),
                "close_error_policy": (close_error_policy, instance.close_error_policy, None),
                "fallback_to_soft": (fallback_to_soft, instance.fallback_to_soft, None),
                "preserve_lock_file": (preserve_lock_file, instance.preserve_lock_file, None),
            }.items()
            if not (same if same is not None else passed == have)
        }
        mismatches.update(instance._singleton_extra_mismatches(kwargs))
        hook_differs = on_acquired is not instance.on_acquired
        if not mismatches and not hook_differs:
            return instance
        msg = "Singleton lock instances cannot be initialized with differing arguments\nNon-matching arguments: "
        for name, (passed, have) in mismatches.items():
            msg += f"\n\t{name} (existing lock has {have} but {passed} was passed)"
        if hook_differs:
            msg += f"\n\ton_acquired (existing lock has {instance.on_acquired} but {on_acquired} was passed)"
        raise ValueError(msg)


class FileLock(contextlib.ContextDecorator, metaclass=_FileLockMeta):
    """A re-entrant, kernel-arbitrated lock on ``lock_file`` with filelock's interface.

    :param lock_file: the lock file's path (created if missing, never deleted)
    :param timeout: default wait in seconds for :meth:`acquire`; negative or ``inf``: no limit
    :param mode: the permissions of a lock file this lock creates (default: 0666 less the
        umask, as filelock); an existing file keeps its own
    :param thread_local: each thread holds its own levels and settings (``False``: one count
        shared by every thread of the process, so another thread may release what one acquired)
    :param blocking: default for :meth:`acquire`; ``False`` makes each acquire one try
    :param is_singleton: return the same instance for the same path (raising ``ValueError``
        when it was made with other arguments), so that re-entrancy spans every user of it
    :param poll_interval: how often ``cancel_check`` is asked during a wait (the wait itself
        is the kernel's and ends at the release)
    :param lifetime: accepted and ignored with a warning, as filelock's native lock does
    :param context_error_policy: ``"chain"`` or ``"group"``: how a ``with`` block's error and a
        release error are raised together
    :param close_error_policy: ``"default"``, ``"raise"`` or ``"suppress"``; accepted (a
        release here has no ``close`` error to report)
    :param fallback_to_soft: accepted; there is no soft fallback (a filesystem without
        ``flock`` is refused)
    :param preserve_lock_file: accepted; the lock file is never deleted either way
    :param on_acquired: called with a descriptor of the lock file once per physical
        acquisition, before :meth:`acquire` returns; if it raises, the lock is released and the
        error propagates
    """

    _instances: ClassVar["weakref.WeakValueDictionary[str, FileLock]"] = weakref.WeakValueDictionary()
    _instances_lock: ClassVar[threading.RLock] = threading.RLock()
    #: How the deadlock message names the other holder.
    _deadlock_holder_desc: ClassVar[str] = "FileLock instance in this thread"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._instances = weakref.WeakValueDictionary()
        cls._instances_lock = threading.RLock()

    def __init__(
        self,
        lock_file: Union[str, "os.PathLike[str]"],
        timeout: float = -1,
        mode: int = _UNSET_FILE_MODE,
        thread_local: bool = True,
        *,
        blocking: bool = True,
        is_singleton: bool = False,
        poll_interval: float = 0.05,
        lifetime: Optional[float] = None,
        context_error_policy: str = "chain",
        close_error_policy: str = "default",
        fallback_to_soft: bool = True,
        preserve_lock_file: bool = False,
        on_acquired: Optional[Callable[[int], None]] = None,
    ) -> None:
        self._creator_pid = os.getpid()
        self._is_thread_local = bool(thread_local)
        self._is_singleton = is_singleton
        self._context_error_policy = context_error_policy
        self._close_error_policy = close_error_policy
        self._fallback_to_soft = fallback_to_soft
        self._preserve_lock_file = preserve_lock_file
        self._on_acquired = on_acquired
        args = (os.fspath(lock_file), _seconds("timeout", timeout), mode, blocking, _poll_interval(poll_interval))
        self._context: _Context = _ThreadContext(*args) if self._is_thread_local else _Context(*args)
        # Shared holds only: `_state` guards the counter (never held while waiting), and
        # `_first` lets one thread at a time wait for the lease itself.
        self._state = threading.RLock()
        self._first = threading.RLock()
        # Thread-local holds of every thread, so that `release(force=True)` and the collector
        # can end the holds of threads that are gone.
        self._holds: Dict[int, Tuple[_Context, threading.Thread]] = {}

    @staticmethod
    def _deadlock_scope() -> Any:
        """Who would wait on itself: the thread (an async lock: the task)."""
        return threading.get_ident()

    def _singleton_extra_mismatches(self, _kwargs: Dict[str, Any]) -> Dict[str, Tuple[str, str]]:
        """A subclass's own constructor options that differ from a singleton's (none here)."""
        return {}

    # --- attributes ---------------------------------------------------------------------

    @property
    def lock_file(self) -> str:
        """The lock file's path."""
        return self._context.lock_file

    @property
    def timeout(self) -> float:
        """The default wait of :meth:`acquire`, in seconds (negative: no limit)."""
        return self._context.timeout

    @timeout.setter
    def timeout(self, value: Any) -> None:
        if isinstance(value, (str, bytes, bytearray)):
            warnings.warn(
                "setting timeout from a string is deprecated and will be removed; pass a number",
                DeprecationWarning,
                stacklevel=2,
            )
            value = float(value)
        self._context.timeout = _seconds("timeout", value)

    @property
    def blocking(self) -> bool:
        """Whether :meth:`acquire` waits by default (``False``: one try)."""
        return self._context.blocking

    @blocking.setter
    def blocking(self, value: bool) -> None:
        _check_blocking(value)
        self._context.blocking = value

    @property
    def poll_interval(self) -> float:
        """How often a wait asks ``cancel_check``, in seconds."""
        return self._context.poll_interval

    @poll_interval.setter
    def poll_interval(self, value: float) -> None:
        self._context.poll_interval = _poll_interval(value)

    @property
    def lifetime(self) -> None:
        """Always ``None``: a kernel lock has no age-based expiry."""
        return None

    @lifetime.setter
    def lifetime(self, value: Optional[float]) -> None:
        _lifetime(value, type(self).__name__, stacklevel=3)

    @property
    def mode(self) -> int:
        """The mode asked for a created lock file (0o644 when none was given, as filelock
        reports it; the file then gets 0666 less the umask)."""
        return 0o644 if self._context.mode == _UNSET_FILE_MODE else self._context.mode

    @property
    def has_explicit_mode(self) -> bool:
        """Whether ``mode`` was given."""
        return self._context.mode != _UNSET_FILE_MODE

    @property
    def is_singleton(self) -> bool:
        """Whether this instance is shared by everyone who asks for its path."""
        return self._is_singleton

    @property
    def context_error_policy(self) -> str:
        """How a ``with`` block's error and a release error are raised together."""
        return self._context_error_policy

    @property
    def close_error_policy(self) -> str:
        """As given to the constructor (accepted for compatibility)."""
        return self._close_error_policy

    @property
    def fallback_to_soft(self) -> bool:
        """As given to the constructor; there is no soft fallback."""
        return self._fallback_to_soft

    @property
    def preserve_lock_file(self) -> bool:
        """As given to the constructor; the lock file is never deleted either way."""
        return self._preserve_lock_file

    @property
    def on_acquired(self) -> Optional[Callable[[int], None]]:
        """The hook run once per physical acquisition, or ``None``."""
        return self._on_acquired

    def is_thread_local(self) -> bool:
        """Whether each thread holds its own levels."""
        return self._is_thread_local

    @property
    def is_locked(self) -> bool:
        """Whether this instance holds the lock (for this thread, when thread-local)."""
        return self._context.lease is not None

    @property
    def lock_counter(self) -> int:
        """How many levels are held (acquired and not yet released)."""
        return self._context.counter

    # --- acquiring ------------------------------------------------------------------------

    def _take(self, budget: Optional[float], path: str) -> Any:
        """The native lease (``budget``: None waits without limit, 0 tries once)."""
        return _native.acquire(path, budget, allow_shared_state=True)

    def _prepare_file(self) -> str:
        """Creates the lock file with this lock's mode if it is missing (never following a
        symbolic link, never touching a file that exists)."""
        _check_path(self.lock_file)
        # A relative path names a file of the working directory the acquisition starts in,
        # whatever it becomes during the wait (as filelock).
        path = os.path.abspath(self.lock_file)
        explicit = self._context.mode != _UNSET_FILE_MODE
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        parent = os.path.dirname(path)
        try:
            if parent:
                os.makedirs(parent, exist_ok=True)
            fd = os.open(path, flags, self._context.mode if explicit else 0o666)
        except (FileExistsError, NotADirectoryError, PermissionError, FileNotFoundError):
            return path  # the library decides about what is there (and says why it cannot be)
        try:
            if explicit:
                os.fchmod(fd, self._context.mode)  # exactly the mode asked, whatever the umask
        finally:
            os.close(fd)
        return path

    def _physical_acquire(
        self, timeout: float, blocking: bool, cancel_check: Optional[Callable[[], bool]], poll_interval: float
    ) -> Any:
        """Takes the lease within the wait; raises :class:`Timeout` (filelock's message)."""
        lock_id, path = id(self), self.lock_file
        opened = self._prepare_file()
        _LOGGER.debug("Attempting to acquire lock %s on %s", lock_id, path)
        start = time.monotonic()
        budget = _budget(timeout, blocking)
        try:
            if budget != 0.0:
                try:
                    return self._try(0.0, opened)
                except Timeout:
                    _LOGGER.debug("Lock %s not acquired on %s, waiting for its release ...", lock_id, path)
                    if budget is not None:
                        budget = max(0.0, start + budget - time.monotonic())
            if cancel_check is None:
                return self._try(budget, opened)
            # A cancel_check is asked every poll_interval: the wait goes on in slices.
            while True:
                if budget == 0.0:
                    return self._try(0.0, opened)
                left = None if budget is None else max(0.0, start + budget - time.monotonic())
                step = poll_interval if left is None else min(poll_interval, left)
                try:
                    return self._try(step if step > 0 else 0.0, opened)
                except Timeout:
                    if cancel_check():
                        _LOGGER.debug("Cancellation requested for lock %s on %s", lock_id, path)
                        raise
                    if left is not None and left <= step:
                        raise
        except Timeout:
            if not blocking:
                _LOGGER.debug("Failed to immediately acquire lock %s on %s", lock_id, path)
            else:
                _LOGGER.debug("Timeout on acquiring lock %s on %s", lock_id, path)
            raise

    def _try(self, budget: Optional[float], path: str) -> Any:
        try:
            return self._take(budget, path)
        except LeaseError as err:
            mapped = self._mapped(err)
            if mapped is err:
                raise
            raise mapped from (None if isinstance(err, Timeout) else err)

    def _mapped(self, err: LeaseError) -> BaseException:
        """The library's error as filelock raises it: ``Timeout`` with filelock's message (the
        holders still in ``pids``), an ``OSError`` subclass for a directory."""
        if isinstance(err, Timeout):
            return Timeout(self.lock_file, f"The file lock '{self.lock_file}' could not be acquired.", cause=err._cause)
        return _filelock_error(err, self.lock_file)

    def _would_deadlock(self, timeout: float, blocking: bool) -> bool:
        if not blocking or timeout >= 0:
            return False
        with _held_lock:
            holders = _held.get((self._deadlock_scope(), _canonical(self.lock_file)), set())
            return bool(holders - {id(self)})

    def _register(self, context: _Context) -> None:
        key = (self._deadlock_scope(), _canonical(self.lock_file))
        context.holder_thread = key  # type: ignore[assignment]
        with _held_lock:
            _held.setdefault(key, set()).add(id(self))
        if self._is_thread_local:
            with self._state:
                self._holds[threading.get_ident()] = (context, threading.current_thread())

    def _run_on_acquired(self, lease: Any) -> None:
        hook = self._on_acquired
        if hook is None:
            return
        flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.lock_file, flags)
        try:
            lease.verify()  # the descriptor is of the locked file
            hook(fd)
        finally:
            os.close(fd)

    def acquire(
        self,
        timeout: Optional[float] = None,
        poll_interval: Optional[float] = None,
        *,
        poll_intervall: Optional[float] = None,
        blocking: Optional[bool] = None,
        cancel_check: Optional[Callable[[], bool]] = None,
    ) -> AcquireReturnProxy:
        """Takes one more level of the lock, waiting for the lease if this holder has none.

        :param timeout: seconds to wait (``None``: this lock's :attr:`timeout`; negative or
            ``inf``: no limit; ``0``: one try)
        :param poll_interval: how often ``cancel_check`` is asked (``None``: this lock's
            :attr:`poll_interval`); the wait itself ends at the release, not at a poll
        :param poll_intervall: the deprecated spelling of ``poll_interval`` (warns)
        :param blocking: ``False`` makes one try (``None``: this lock's :attr:`blocking`)
        :param cancel_check: asked every ``poll_interval`` while waiting; ``True`` ends the
            wait with :class:`Timeout`
        :raises Timeout: the lock could not be had in time
        :raises RuntimeError: another instance holds this lock file in this thread and the wait
            has no limit (it would never end)
        :returns: a proxy whose ``with`` block releases this level on exit
        """
        context = self._context
        if timeout is None:
            timeout = context.timeout
        if blocking is None:
            blocking = context.blocking
        else:
            _check_blocking(blocking)
        if poll_intervall is not None:
            warnings.warn("use poll_interval instead of poll_intervall", DeprecationWarning, stacklevel=2)
            poll_interval = poll_intervall
        poll = _poll_interval(context.poll_interval if poll_interval is None else poll_interval)
        wait = _timeout_for_acquire(timeout, blocking)
        if self._is_thread_local:
            self._acquire_in(context, wait, blocking, cancel_check, poll)
            return AcquireReturnProxy(self)
        # A shared instance: one thread at a time goes through an acquisition (its wait, and
        # its on_acquired hook), as filelock's; the others wait their turn within their own
        # timeout and cancel_check.
        self._enter_transition(wait, blocking, cancel_check, poll)
        try:
            self._acquire_in(context, wait, blocking, cancel_check, poll)
        finally:
            self._first.release()
        return AcquireReturnProxy(self)

    def _enter_transition(
        self, wait: float, blocking: bool, cancel_check: Optional[Callable[[], bool]], poll: float
    ) -> None:
        if not blocking:
            if self._first.acquire(blocking=False):
                return
            raise Timeout(self.lock_file)
        deadline = None if wait < 0 else time.monotonic() + wait
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = left if cancel_check is None else (poll if left is None else min(poll, left))
            if self._first.acquire(timeout=-1 if step is None else step):
                return
            if cancel_check is not None and cancel_check():
                raise Timeout(self.lock_file)
            if deadline is not None and time.monotonic() >= deadline:
                raise Timeout(self.lock_file)

    def _acquire_in(
        self,
        context: _Context,
        wait: float,
        blocking: bool,
        cancel_check: Optional[Callable[[], bool]],
        poll: float,
    ) -> None:
        if context.lease is not None:
            context.counter += 1
            return
        if self._would_deadlock(wait, blocking):
            raise RuntimeError(self._deadlock_message())
        lease = self._physical_acquire(wait, blocking, cancel_check, poll)
        # Held from here on (is_locked, the deadlock check): the hook runs as a holder.
        try:
            with self._state:
                context.lease = lease
                context.counter = 1
            self._register(context)
            self._run_on_acquired(lease)
        except BaseException:
            # The hook failed, or a signal handler raised while the hold was being recorded:
            # nothing of this acquisition stays.
            if context.lease is lease:
                self._release_context(context, True)
            else:
                lease.release()
            raise
        _LOGGER.debug("Lock %s acquired on %s", id(self), self.lock_file)

    def _deadlock_message(self) -> str:
        return (
            f"Deadlock: lock '{self.lock_file}' is already held by a different {self._deadlock_holder_desc}. "
            "Use is_singleton=True to enable reentrant locking across instances."
        )

    # --- releasing ------------------------------------------------------------------------

    def release(self, force: bool = False, *, _of: Optional[_Context] = None) -> None:
        """Releases one level (``force``: all of them, and the holds of threads that have
        exited); the last one releases the lease. Releasing a lock not held does nothing."""
        # The release itself is made before any call into Python code (the log line's is in a
        # try whose finally releases): a signal handler that raises (KeyboardInterrupt) in
        # one leaves the counter, the lease and the deadlock registry agreeing.
        context = self._context if _of is None else _of
        with self._state:
            lease = context.lease
            if lease is not None and not force and context.counter > 1:
                context.counter -= 1
                return
            if lease is not None:
                try:
                    _LOGGER.debug("Attempting to release lock %s on %s", id(self), context.lock_file)
                finally:
                    # Only built-in calls from here: the release completes whatever the log did.
                    lease.release()
                    context.lease = None
                    context.counter = 0
                    key = context.holder_thread
                    context.holder_thread = None
                    if key is not None:
                        with _held_lock:
                            holders = _held.get(key)  # type: ignore[call-overload]
                            if holders is not None:
                                holders.discard(id(self))
                                if not holders:
                                    del _held[key]  # type: ignore[arg-type]
                    for ident, (held, _thread) in list(self._holds.items()):
                        if held is context:
                            del self._holds[ident]
        if lease is not None:
            _LOGGER.debug("Lock %s released on %s", id(self), context.lock_file)
        if force and _of is None and self._is_thread_local:
            with self._state:
                gone = [held for held, thread in self._holds.values() if not thread.is_alive()]
            for held in gone:
                FileLock.release(self, True, _of=held)

    def _release(self, force: bool) -> None:
        FileLock.release(self, force)

    def _release_context(self, context: _Context, force: bool) -> None:
        FileLock.release(self, force, _of=context)

    def __enter__(self: _Lock) -> _Lock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except BaseException as release_error:
            if exc_value is None or self._context_error_policy == "chain":
                raise
            group = getattr(builtins, "BaseExceptionGroup", None)
            if group is None:  # Python before 3.11: the release error, the body's as its context
                raise
            raise group("the with block and the lock's release both failed", [exc_value, release_error]) from None

    def __del__(self) -> None:
        if vars(self).get("_creator_pid") != os.getpid():
            return
        with contextlib.suppress(Exception):
            self._release(True)
            with self._state:
                holds = [held for held, _thread in self._holds.values()]
            for held in holds:
                self._release_context(held, True)

    def __repr__(self) -> str:
        state = f"locked x{self.lock_counter}" if self.is_locked else "unlocked"
        return f"<leasehold_lock.{type(self).__name__} {self.lock_file!r} {state}>"


# --- asyncio ----------------------------------------------------------------------------


class AsyncAcquireReturnProxy:
    """What :meth:`AsyncFileLock.acquire` returns: ``async with await lock.acquire():``
    holds one level and releases it on exit."""

    def __init__(self, lock: "AsyncFileLock") -> None:
        self.lock = lock

    async def __aenter__(self) -> "AsyncFileLock":
        return self.lock

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        await self.lock.release()


class _AsyncFileLockMeta(_FileLockMeta):
    def __call__(  # type: ignore[override]
        cls,
        lock_file: Union[str, "os.PathLike[str]"],
        timeout: float = -1,
        mode: int = _UNSET_FILE_MODE,
        thread_local: bool = False,
        *,
        loop: Optional[asyncio.AbstractEventLoop] = None,
        run_in_executor: bool = True,
        executor: Any = None,
        **kwargs: Any,
    ) -> Any:
        if thread_local and run_in_executor:
            raise ValueError("run_in_executor is not supported when thread_local is True")
        return super().__call__(
            lock_file,
            timeout,
            mode,
            thread_local,
            loop=loop,
            run_in_executor=run_in_executor,
            executor=executor,
            **kwargs,
        )


class AsyncFileLock(FileLock, metaclass=_AsyncFileLockMeta):
    """:class:`FileLock` for asyncio (filelock's ``AsyncFileLock``): ``acquire`` and
    ``release`` are coroutines, ``async with lock:`` holds it, and a wait never blocks the
    event loop (it runs on the library's driver; cancelling the task ends it, leaving nothing
    held). Holds are per instance by default (``thread_local=False``), and the deadlock
    check is per task. ``loop``, ``run_in_executor`` and ``executor`` are accepted: no
    executor is needed, since nothing here blocks the loop."""

    _deadlock_holder_desc: ClassVar[str] = "AsyncFileLock instance in this task"

    def __init__(
        self,
        lock_file: Union[str, "os.PathLike[str]"],
        timeout: float = -1,
        mode: int = _UNSET_FILE_MODE,
        thread_local: bool = False,
        *,
        blocking: bool = True,
        is_singleton: bool = False,
        poll_interval: float = 0.05,
        lifetime: Optional[float] = None,
        context_error_policy: str = "chain",
        close_error_policy: str = "default",
        fallback_to_soft: bool = True,
        preserve_lock_file: bool = False,
        on_acquired: Optional[Callable[[int], None]] = None,
        loop: Optional[asyncio.AbstractEventLoop] = None,
        run_in_executor: bool = True,
        executor: Any = None,
    ) -> None:
        super().__init__(
            lock_file,
            timeout,
            mode,
            thread_local,
            blocking=blocking,
            is_singleton=is_singleton,
            poll_interval=poll_interval,
            lifetime=lifetime,
            context_error_policy=context_error_policy,
            close_error_policy=close_error_policy,
            fallback_to_soft=fallback_to_soft,
            preserve_lock_file=preserve_lock_file,
            on_acquired=on_acquired,
        )
        self._loop = loop
        self._run_in_executor = run_in_executor
        self._executor = executor
        self._transition: Optional[asyncio.Lock] = None

    def _singleton_extra_mismatches(self, kwargs: Dict[str, Any]) -> Dict[str, Tuple[str, str]]:
        mismatches = {
            name: (str(kwargs.get(name)), str(value))
            for name, value in (("loop", self._loop), ("executor", self._executor))
            if kwargs.get(name) is not value
        }
        if kwargs.get("run_in_executor", True) != self._run_in_executor:
            mismatches["run_in_executor"] = (str(kwargs.get("run_in_executor")), str(self._run_in_executor))
        return mismatches

    @staticmethod
    def _deadlock_scope() -> Any:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        return threading.get_ident() if task is None else ("task", id(task))

    @property
    def run_in_executor(self) -> bool:
        """As given (nothing here blocks the loop, so no executor is used)."""
        return self._run_in_executor

    @property
    def executor(self) -> Any:
        """As given (unused)."""
        return self._executor

    @executor.setter
    def executor(self, value: Any) -> None:
        self._executor = value

    @property
    def loop(self) -> Optional[asyncio.AbstractEventLoop]:
        """As given."""
        return self._loop

    async def acquire(  # type: ignore[override]
        self,
        timeout: Optional[float] = None,
        poll_interval: Optional[float] = None,
        *,
        blocking: Optional[bool] = None,
        cancel_check: Optional[Callable[[], bool]] = None,
    ) -> AsyncAcquireReturnProxy:
        """Takes one more level, waiting without blocking the event loop (the arguments are
        :meth:`FileLock.acquire`'s)."""
        context = self._context
        if timeout is None:
            timeout = context.timeout
        if blocking is None:
            blocking = context.blocking
        else:
            _check_blocking(blocking)
        poll = _poll_interval(context.poll_interval if poll_interval is None else poll_interval)
        wait = _timeout_for_acquire(timeout, blocking)
        if context.lease is not None:
            context.counter += 1
            return AsyncAcquireReturnProxy(self)
        if self._would_deadlock(wait, blocking):
            raise RuntimeError(self._deadlock_message())
        if self._transition is None:
            self._transition = asyncio.Lock()
        start = time.monotonic()
        # One task at a time goes through an acquisition of this instance; the others wait
        # their turn within their own timeout.
        if not self._transition.locked():
            await self._transition.acquire()  # free: taken at once
        elif not blocking or wait == 0:
            raise Timeout(self.lock_file)
        else:
            try:
                await asyncio.wait_for(self._transition.acquire(), None if wait < 0 else wait)
            except asyncio.TimeoutError:
                raise Timeout(self.lock_file) from None
        try:
            if context.lease is not None:
                context.counter += 1
                return AsyncAcquireReturnProxy(self)
            left = wait if wait < 0 or not blocking else max(0.0, start + wait - time.monotonic())
            lease = await self._physical_acquire_async(left, blocking, cancel_check, poll)
            with self._state:
                context.lease = lease
                context.counter = 1
            self._register(context)
            try:
                if self._on_acquired is not None and self._run_in_executor:
                    # The hook may block (it writes to the file): off the event loop, as filelock.
                    loop = asyncio.get_running_loop()
                    await loop.run_in_executor(self._executor, self._run_on_acquired, lease)
                else:
                    self._run_on_acquired(lease)
            except BaseException:
                self._release_context(context, True)
                raise
            _LOGGER.debug("Lock %s acquired on %s", id(self), self.lock_file)
        finally:
            self._transition.release()
        return AsyncAcquireReturnProxy(self)

    async def _physical_acquire_async(
        self, timeout: float, blocking: bool, cancel_check: Optional[Callable[[], bool]], poll_interval: float
    ) -> Any:
        from . import acquire_async  # the package's asyncio acquisition (defined beside it)

        lock_id, path = id(self), self.lock_file
        opened = self._prepare_file()
        _LOGGER.debug("Attempting to acquire lock %s on %s", lock_id, path)
        start = time.monotonic()
        budget = _budget(timeout, blocking)

        async def attempt(seconds: Optional[float]) -> Any:
            try:
                return await acquire_async(opened, seconds, allow_shared_state=True)
            except LeaseError as err:
                mapped = self._mapped(err)
                if mapped is err:
                    raise
                raise mapped from (None if isinstance(err, Timeout) else err)

        try:
            if budget != 0.0:
                try:
                    return await attempt(0.0)
                except Timeout:
                    _LOGGER.debug("Lock %s not acquired on %s, waiting for its release ...", lock_id, path)
                    if budget is not None:
                        budget = max(0.0, start + budget - time.monotonic())
            if cancel_check is None or budget == 0.0:
                return await attempt(budget)
            while True:
                left = None if budget is None else max(0.0, start + budget - time.monotonic())
                step = poll_interval if left is None else min(poll_interval, left)
                try:
                    return await attempt(step)
                except Timeout:
                    if cancel_check():
                        _LOGGER.debug("Cancellation requested for lock %s on %s", lock_id, path)
                        raise
                    if left is not None and left <= step:
                        raise
        except Timeout:
            if not blocking:
                _LOGGER.debug("Failed to immediately acquire lock %s on %s", lock_id, path)
            else:
                _LOGGER.debug("Timeout on acquiring lock %s on %s", lock_id, path)
            raise

    async def release(self, force: bool = False) -> None:  # type: ignore[override]
        """Releases one level (``force``: all of them); the last one releases the lease."""
        self._release(force)

    def __enter__(self) -> Any:
        raise NotImplementedError(
            "Use `async with`: acquire/release are coroutines and cannot be awaited in a sync context manager."
        )

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        raise NotImplementedError(
            "Use `async with`: acquire/release are coroutines and cannot be awaited in a sync context manager."
        )

    async def __aenter__(self) -> "AsyncFileLock":
        await self.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            self._release(False)
        except BaseException as release_error:
            if exc_value is None or self._context_error_policy == "chain":
                raise
            group = getattr(builtins, "BaseExceptionGroup", None)
            if group is None:
                raise
            raise group("the with block and the lock's release both failed", [exc_value, release_error]) from None


# --- read-write -------------------------------------------------------------------------


def _read_write_timeout(timeout: Any, blocking: bool) -> float:
    seconds = _timeout_for_acquire(timeout, blocking)
    if seconds < 0 and seconds != -1 and blocking:
        raise ValueError(f"timeout must be a non-negative number or -1, not {seconds!r}")
    return seconds


class _ReadWriteLockMeta(type):
    """Hands out one instance per lock file unless ``is_singleton=False`` (filelock's default
    for ``ReadWriteLock``), refusing one made with other arguments."""

    def __call__(  # type: ignore[override]
        cls,
        lock_file: Union[str, "os.PathLike[str]"],
        timeout: float = -1,
        *,
        blocking: bool = True,
        is_singleton: bool = True,
    ) -> Any:
        timeout = _seconds("timeout", timeout)
        if not is_singleton:
            return super().__call__(lock_file, timeout, blocking=blocking, is_singleton=False)
        key = _canonical(os.fspath(lock_file))
        with cls._instances_lock:  # type: ignore[attr-defined]
            instance = cls._instances.get(key)  # type: ignore[attr-defined]
            if instance is None:
                instance = super().__call__(lock_file, timeout, blocking=blocking, is_singleton=True)
                cls._instances[key] = instance  # type: ignore[attr-defined]

            def wait(t: float) -> Any:
                return "nan" if math.isnan(t) else (-1.0 if t == math.inf else t)

            if wait(instance.timeout) != wait(timeout) or instance.blocking != blocking:
                raise ValueError(
                    f"Singleton lock created with timeout={instance.timeout}, blocking={instance.blocking},"
                    f" cannot be changed to timeout={timeout}, blocking={blocking}"
                )
            return instance


class ReadWriteLock(metaclass=_ReadWriteLockMeta):
    """filelock's ``ReadWriteLock`` over leasehold's shared leases: any number of readers
    (``acquire_read``) or one writer (``acquire_write``) across processes, and a waiting
    writer is not starved by readers that keep overlapping (the library's shared lease).

    Re-entrant in the same mode; upgrading or downgrading raises ``RuntimeError``; a write
    hold belongs to the thread that took it, a read level to the thread that took it. An
    instance coordinates processes, not threads: a thread asking for the other mode of
    another thread's hold raises ``RuntimeError`` (give each thread its own instance,
    ``is_singleton=False``). The lock file is a plain file (filelock's is an SQLite database);
    like ``FileLock``, it may be one another user owns or may write.
    """

    _instances: ClassVar["weakref.WeakValueDictionary[str, ReadWriteLock]"] = weakref.WeakValueDictionary()
    _instances_lock: ClassVar[threading.RLock] = threading.RLock()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._instances = weakref.WeakValueDictionary()
        cls._instances_lock = threading.RLock()

    @classmethod
    def get_lock(
        cls, lock_file: Union[str, "os.PathLike[str]"], timeout: float = -1, *, blocking: bool = True
    ) -> "ReadWriteLock":
        """The singleton for ``lock_file`` (``ValueError`` if it has other arguments)."""
        return cls(lock_file, timeout, blocking=blocking)

    def __init__(
        self,
        lock_file: Union[str, "os.PathLike[str]"],
        timeout: float = -1,
        *,
        blocking: bool = True,
        is_singleton: bool = True,
    ) -> None:
        self.lock_file = os.fspath(lock_file)
        # The file named when the lock was made, wherever the process moves later.
        self._path = os.path.abspath(self.lock_file)
        self.timeout = timeout
        self.blocking = blocking
        self._creator_pid = os.getpid()
        self._transaction = threading.Lock()  # one thread at a time takes the lease
        self._internal = threading.Lock()  # guards the levels below
        self._lease: Optional[Any] = None
        self._current_mode: Optional[str] = None
        self._lock_level = 0
        self._write_thread: Optional[int] = None
        self._read_depths: Dict[int, int] = {}
        self._closed = False

    def acquire_read(self, timeout: Optional[float] = None, *, blocking: Optional[bool] = None) -> AcquireReturnProxy:
        """Takes a shared (read) level; ``timeout``/``blocking`` default to the instance's."""
        return self._acquire(
            "read", self.timeout if timeout is None else timeout, self.blocking if blocking is None else blocking
        )

    def acquire_write(self, timeout: Optional[float] = None, *, blocking: Optional[bool] = None) -> AcquireReturnProxy:
        """Takes an exclusive (write) level; ``timeout``/``blocking`` default to the instance's."""
        return self._acquire(
            "write", self.timeout if timeout is None else timeout, self.blocking if blocking is None else blocking
        )

    @contextlib.contextmanager
    def read_lock(self, timeout: Optional[float] = None, *, blocking: Optional[bool] = None) -> Any:
        """A ``with`` block holding a read level."""
        self.acquire_read(timeout, blocking=blocking)
        try:
            yield
        finally:
            self.release()

    @contextlib.contextmanager
    def write_lock(self, timeout: Optional[float] = None, *, blocking: Optional[bool] = None) -> Any:
        """A ``with`` block holding a write level."""
        self.acquire_write(timeout, blocking=blocking)
        try:
            yield
        finally:
            self.release()

    def _acquire(self, mode: str, timeout: Any, blocking: bool) -> AcquireReturnProxy:
        if self._closed:
            raise RuntimeError(f"Cannot operate on a closed ReadWriteLock ({self.lock_file})")
        _check_blocking(blocking)
        wait = _read_write_timeout(timeout, blocking)
        with self._internal:
            if self._lock_level > 0:
                return self._reenter(mode)
        start = time.monotonic()
        if not blocking:
            entered = self._transaction.acquire(blocking=False)
        elif wait < 0:
            entered = self._transaction.acquire()
        else:
            entered = self._transaction.acquire(timeout=min(wait, threading.TIMEOUT_MAX))
        if not entered:
            raise Timeout(self.lock_file)
        try:
            with self._internal:
                if self._lock_level > 0:
                    return self._reenter(mode)
            left = wait if wait < 0 or not blocking else max(0.0, start + wait - time.monotonic())
            try:
                lease = _native.acquire(
                    self._path, _budget(left, blocking), shared=mode == "read", allow_shared_state=True
                )
            except Timeout as err:
                raise Timeout(
                    self.lock_file, f"The file lock '{self.lock_file}' could not be acquired.", cause=err._cause
                ) from None
            with self._internal:
                self._lease = lease
                self._current_mode = mode
                self._lock_level = 1
                me = threading.get_ident()
                if mode == "write":
                    self._write_thread = me
                else:
                    self._read_depths = {me: 1}
        finally:
            self._transaction.release()
        return AcquireReturnProxy(self)

    def _reenter(self, mode: str) -> AcquireReturnProxy:
        me = threading.get_ident()
        if self._current_mode != mode:
            opposite = "write" if mode == "read" else "read"
            if me == self._write_thread or me in self._read_depths:
                direction = "downgrade" if mode == "read" else "upgrade"
                reason = f"already holding a {opposite} lock ({direction} not allowed)"
            else:
                reason = (
                    f"another thread holds a {opposite} lock on this instance, which coordinates processes rather "
                    "than threads; give each thread its own instance with is_singleton=False"
                )
            raise RuntimeError(f"Cannot acquire {mode} lock on {self.lock_file} (lock id: {id(self)}): {reason}")
        if mode == "write" and me != self._write_thread:
            raise RuntimeError(
                f"Cannot acquire write lock on {self.lock_file} (lock id: {id(self)}) "
                f"from thread {me} while it is held by thread {self._write_thread}"
            )
        if mode == "read":
            self._read_depths[me] = self._read_depths.get(me, 0) + 1
        self._lock_level += 1
        return AcquireReturnProxy(self)

    def release(self, *, force: bool = False) -> None:
        """Releases one level of this thread's hold (``force``: every level of every thread).

        :raises RuntimeError: without ``force``, when this thread holds no level of the lock
        """
        me = threading.get_ident()
        with self._internal:
            if not force:
                if self._current_mode == "write" and me != self._write_thread:
                    raise RuntimeError(
                        f"Cannot release write lock on {self.lock_file} (lock id: {id(self)}) "
                        f"from thread {me} while it is held by thread {self._write_thread}"
                    )
                if self._current_mode == "read" and me not in self._read_depths:
                    raise RuntimeError(
                        f"Cannot release read lock on {self.lock_file} (lock id: {id(self)}) "
                        f"from thread {me}, which does not hold it"
                    )
                if self._lock_level == 0:
                    raise RuntimeError(
                        f"Cannot release a lock on {self.lock_file} (lock id: {id(self)}) that is not held"
                    )
                if self._lock_level > 1:
                    self._lock_level -= 1
                    if self._current_mode == "read":
                        depth = self._read_depths.pop(me) - 1
                        if depth:
                            self._read_depths[me] = depth
                    return
            lease, self._lease = self._lease, None
            self._lock_level = 0
            self._current_mode = None
            self._write_thread = None
            self._read_depths = {}
            if lease is not None:
                lease.release()

    def close(self) -> None:
        """Releases every level of every thread; the instance cannot be used again."""
        self.release(force=True)
        self._closed = True

    def __del__(self) -> None:
        if vars(self).get("_creator_pid") == os.getpid():
            with contextlib.suppress(Exception):
                self.release(force=True)
