"""``Document``: a file of your own (settings, state) that several processes read and rewrite
without losing an update.

The protocol is the Rust library's (``leasehold_stores::Document``): an update takes the
document's lease (the lock file ``FILE.lock`` beside it, unless ``lock_path`` says otherwise),
reads the durable content again under it, applies the change and writes the new version
durably (temporary, fsync, rename, directory fsync), verifying the lease before the rename.
Reads take no lock and always see one whole version. A version is a string of 32 hex digits
(a digest of the content), the same in every process and language.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator, NamedTuple, Optional, Union

from . import _native

__all__ = ["Document", "DocumentWatch", "Snapshot"]

_ENCODINGS = ("json", "text", "bytes")


class Snapshot(NamedTuple):
    """One whole version of a document: its decoded value and its version."""

    value: Any
    version: str


class Document:
    """A document shared by several processes.

    ``encoding`` is ``"json"`` (the default: values are parsed and written as JSON; a
    document that does not parse is never overwritten by an update, and raises
    ``LeaseError(code='INVALID_INPUT')``), ``"text"`` (UTF-8 ``str``) or ``"bytes"``.

    ``on_shared_mount=Record(ttl=SECONDS)``: on a mount whose kernel locks stay on each host
    (NFS with ``local_lock=all`` or ``nolock``, SMB with ``nobrl``, sshfs and most FUSE), an
    update's lease is a record lease with this TTL, which excludes writers on every host
    sharing the directory; every write is then fenced (refused when too little of the
    lease's validity is left, or when a newer holder's token is in ``<lock>.fence``), so a
    writer paused past its TTL writes nothing. Without it such a mount is refused
    (``LeaseError(code='NETWORK_FS')``, naming the keyword). Elsewhere it changes nothing.
    """

    def __init__(
        self,
        path: Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"],
        *,
        lock_path: Optional[Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]] = None,
        encoding: str = "json",
        allow_shared_state: bool = False,
        on_shared_mount: Optional[_native.Record] = None,
    ) -> None:
        if encoding not in _ENCODINGS:
            raise ValueError(f"encoding must be one of {_ENCODINGS}, not {encoding!r}")
        self._encoding = encoding
        self._native = _native._Document(
            os.fsdecode(path),
            None if lock_path is None else os.fsdecode(lock_path),
            encoding == "json",
            allow_shared_state,
            on_shared_mount,
        )

    @property
    def path(self) -> str:
        """The document's file."""
        return os.fsdecode(self._native.path)

    @property
    def lock_path(self) -> str:
        """The lock file writers lease."""
        return os.fsdecode(self._native.lock_path)

    def _decode(self, content: Optional[bytes]) -> Any:
        if content is None:
            return None
        if self._encoding == "json":
            return json.loads(content)
        if self._encoding == "text":
            return content.decode("utf-8")
        return content

    def _encode(self, value: Any) -> bytes:
        if self._encoding == "json":
            return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        if self._encoding == "text":
            return str(value).encode("utf-8")
        return bytes(value)

    def _empty(self) -> Any:
        return {"json": dict, "text": str, "bytes": bytearray}[self._encoding]()

    def read(self) -> Any:
        """The current value (``None`` when there is no document). Takes no lock."""
        snap = self._native.read()
        return None if snap is None else self._decode(snap[0])

    def snapshot(self) -> Optional[Snapshot]:
        """The current value and its version (``None`` when there is no document)."""
        snap = self._native.read()
        return None if snap is None else Snapshot(self._decode(snap[0]), snap[1])

    @contextmanager
    def edit(self, timeout: Optional[float] = None) -> Iterator[Any]:
        """Holds the document's lease for the ``with`` block and yields the current value
        (for JSON, an empty ``dict`` when there is no document) to change in place: it is
        written when the block ends normally, and nothing is written when it raises.
        ``timeout`` is how long to wait for the lease, in seconds (``None``: without limit;
        ``Timeout`` is raised when it runs out)."""
        edit = self._native.begin(timeout)
        try:
            current = edit.current
            value = self._empty() if current is None else self._decode(current)
            yield value
        except BaseException:
            edit.abort()
            raise
        edit.commit(self._encode(value))

    def update(
        self,
        fn: Callable[[Any], Any],
        timeout: Optional[float] = None,
        *,
        if_version: Optional[str] = None,
    ) -> Any:
        """Replaces the value with ``fn(current)`` under the lease (``current`` is ``None``
        when there is no document); a ``fn`` that returns ``None`` changed ``current`` in
        place, which is written. Returns the value written. An exception from ``fn`` writes
        nothing. With ``if_version``, raises ``LeaseError(code='CONFLICT')`` (writing
        nothing) unless the document is still at that version."""
        edit = self._native.begin(timeout, if_version)
        try:
            current = self._decode(edit.current)
            new = fn(current)
            if new is None:
                new = current
            content = self._encode(new)
        except BaseException:
            edit.abort()
            raise
        edit.commit(content)
        return new

    def update_if(self, version: str, fn: Callable[[Any], Any], timeout: Optional[float] = None) -> Any:
        """:meth:`update` only if the document is still at ``version``."""
        return self.update(fn, timeout, if_version=version)

    async def update_async(
        self, fn: Callable[[Any], Any], timeout: Optional[float] = None
    ) -> Any:
        """:meth:`update` for asyncio: the wait for the lease and the durable write run in
        the loop's default executor; ``fn`` may be a coroutine function, and the lease is held
        while it runs. If the awaiting task is cancelled during the wait, the wait still ends
        within ``timeout`` in its thread and the lease it may get is released unused."""
        loop = asyncio.get_running_loop()
        begin = loop.run_in_executor(None, self._native.begin, timeout)
        try:
            edit = await asyncio.shield(begin)
        except asyncio.CancelledError:
            begin.add_done_callback(lambda f: f.cancelled() or f.exception() or f.result().abort())
            raise
        try:
            current = self._decode(edit.current)
            new = fn(current)
            if inspect.isawaitable(new):
                new = await new
            if new is None:
                new = current
            content = self._encode(new)
        except BaseException:
            edit.abort()
            raise
        await loop.run_in_executor(None, edit.commit, content)
        return new

    def watch(self, poll: float = 0.1) -> "DocumentWatch":
        """The new versions from now on, as :class:`Snapshot` s: an iterator (blocking) and an
        async iterator. Versions written faster than they are read may be coalesced (never an
        older one after a newer one; the latest always comes)."""
        return DocumentWatch(self, self._native.watch(), poll)


class DocumentWatch:
    """The iterator :meth:`Document.watch` returns. It returns to Python every ``poll``
    seconds while it waits, so Ctrl-C ends a blocking iteration promptly."""

    def __init__(self, doc: Document, native: Any, poll: float) -> None:
        self._doc = doc
        self._native = native
        self._poll = poll

    def __iter__(self) -> "DocumentWatch":
        return self

    def __next__(self) -> Snapshot:
        while True:
            snap = self._native.next(self._poll)
            if snap is not None:
                return Snapshot(self._doc._decode(snap[0]), snap[1])

    def __aiter__(self) -> "DocumentWatch":
        return self

    async def __anext__(self) -> Snapshot:
        loop = asyncio.get_running_loop()
        while True:
            snap = await loop.run_in_executor(None, self._native.next, self._poll)
            if snap is not None:
                return Snapshot(self._doc._decode(snap[0]), snap[1])
