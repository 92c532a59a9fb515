"""Type stubs of the native module ``leasehold_lock._native`` (Rust, PyO3)."""

import os
from types import TracebackType
from typing import Any, Callable, List, Optional, Tuple, Type, Union

_Path = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

__version__: str

class Record:
    """on_shared_mount=Record(ttl=SECONDS): on a mount whose kernel locks stay on each host
    (NFS local_lock=all or nolock, SMB nobrl, sshfs and most FUSE), an exclusive lease is a
    record lease with this TTL, which excludes every host and carries a fencing token."""

    def __init__(self, ttl: float) -> None: ...
    @property
    def ttl(self) -> float: ...

class Lease:
    """A lease held by this process; released by release(), a with block's end, garbage
    collection, or process exit. A kernel lease never expires; a record lease ends a TTL
    after its holder stopped renewing it."""

    @property
    def path(self) -> str: ...
    @property
    def shared(self) -> bool: ...
    @property
    def held(self) -> bool: ...
    @property
    def fencing_token(self) -> Optional[int]: ...
    def verify(self) -> None: ...
    def release(self) -> None: ...
    def __enter__(self) -> "Lease": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None: ...

class _Cause:
    def message(self) -> str: ...
    def pids(self) -> List[int]: ...

def acquire(
    path: _Path,
    timeout: Optional[float] = None,
    *,
    shared: bool = False,
    allow_network_fs: bool = False,
    allow_shared_state: bool = False,
    on_shared_mount: Optional[Record] = None,
) -> Lease: ...
def try_acquire(
    path: _Path,
    *,
    shared: bool = False,
    allow_network_fs: bool = False,
    allow_shared_state: bool = False,
    on_shared_mount: Optional[Record] = None,
) -> Optional[Lease]: ...
class _AsyncWait:
    def cancel(self) -> None: ...
    def settled(self) -> None: ...

def start_acquire(
    path: _Path,
    timeout: Optional[float],
    shared: bool,
    allow_network_fs: bool,
    allow_shared_state: bool,
    on_shared_mount: Optional[Record],
    event_loop: Any,
    finish: Callable[[Union[Lease, BaseException]], None],
) -> _AsyncWait: ...
def holders(path: _Path) -> Optional[List[int]]: ...
def _before_fork() -> None: ...
def _after_fork_in_parent() -> None: ...
def _after_fork_in_child() -> bool: ...

class _Edit:
    @property
    def current(self) -> Optional[bytes]: ...
    @property
    def version(self) -> Optional[str]: ...
    def commit(self, content: bytes) -> str: ...
    def abort(self) -> None: ...

class _Watch:
    def next(self, timeout: float) -> Optional[Tuple[bytes, str]]: ...

class _Document:
    def __init__(
        self,
        path: _Path,
        lock_path: Optional[_Path] = None,
        json: bool = False,
        allow_shared_state: bool = False,
        on_shared_mount: Optional[Record] = None,
    ) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def lock_path(self) -> str: ...
    def read(self) -> Optional[Tuple[bytes, str]]: ...
    def begin(self, timeout: Optional[float] = None, expected: Optional[str] = None) -> _Edit: ...
    def watch(self) -> _Watch: ...
