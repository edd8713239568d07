"""A SQLite store's large log chunks, kept in files beside its database: ``trainmon.db-logs/``, one
file a log stream, each chunk's packed text appended to it and its row holding where (offset and
length) instead of the text.

Why: a flood of output is stored as chunks of a megabyte or so, packed to a fifth of that. Kept in
the database, each packed byte was written twice, into the write-ahead log and again into the
database when the log was checkpointed, and SQLite copied it into pages on the way: for a gigabyte
of output, 0.55 CPU s in the writer and 0.33 in the checkpoint. Appended to a file it is written
once: the writer takes 0.22 and the checkpoint nothing (docs/architecture.md). A job that prints a
line at a time makes chunks far smaller than :data:`BESIDE_BYTES`, and they stay in the database.

The bytes reach the disk (``fdatasync``) before the transaction that holds the rows is committed, so
a row never refers to bytes a crash could lose; a write that fails is cut back off the file. A
transaction that fails after them leaves its bytes unreferenced (a retried batch appends them again).
A stream's file goes with its job; one left by a stream whose number the database gave again is
removed when that stream is made. The PostgreSQL store keeps every chunk in the database, which
hosts on other machines share.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from collections.abc import Iterable
from pathlib import Path

from ..errors import StoreError
from .base import PackedChunk
from .codec import TEXT_BESIDE
from .sql import store_error

BESIDE_BYTES = 64 << 10  # a chunk whose packed text is this long or longer is kept beside the database
_WHERE = struct.Struct("<QQ")  # what the row of a chunk kept beside holds: the text's offset and length
_MOST_PARTS = 512  # pieces a write is given at once (writev takes at most IOV_MAX)


class LogFiles:
    """The files beside the database at ``database`` (``<name>-logs/``)."""

    def __init__(self, database: Path) -> None:
        self.directory = database.with_name(database.name + "-logs")

    def path(self, stream_id: int) -> Path:
        return self.directory / str(stream_id)

    def place(self, chunks: list[PackedChunk]) -> list[PackedChunk]:
        """The chunks as their rows hold them: the large ones' texts appended to their streams' files
        and on the disk, their rows holding where (flagged :data:`~trainmon.store.codec.TEXT_BESIDE`);
        the others as they are."""
        large: dict[int, list[int]] = {}
        for index, chunk in enumerate(chunks):
            if len(chunk[4]) >= BESIDE_BYTES:
                large.setdefault(chunk[0], []).append(index)
        if not large:
            return chunks
        placed = list(chunks)
        for stream_id, indexes in large.items():
            at = self._append(stream_id, [chunks[index][4] for index in indexes])
            for index in indexes:
                stream, first, count, stamp, text, packing = chunks[index]
                placed[index] = (stream, first, count, stamp, _WHERE.pack(at, len(text)), packing | TEXT_BESIDE)
                at += len(text)
        return placed

    def read(self, stream_id: int, where: bytes) -> bytes | None:
        """A chunk's packed text, from where its row says; None when the file no longer holds it."""
        offset, length = _WHERE.unpack(where)
        try:
            fd = os.open(self.path(stream_id), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            text = os.pread(fd, length, offset)
        except OSError:
            return None
        finally:
            os.close(fd)
        return text if len(text) == length else None

    def forget(self, stream_ids: Iterable[int]) -> None:
        """The streams' files removed (a job deleted, or a stream given a number a deleted one had)."""
        for stream_id in stream_ids:
            with contextlib.suppress(OSError):  # (none, or a store this user may only read)
                os.unlink(self.path(stream_id))

    def _append(self, stream_id: int, texts: list[bytes]) -> int:
        """Where ``texts`` begin in the stream's file, appended one after another and on the disk."""
        try:
            self.directory.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(self.path(stream_id), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise _error(exc, self.directory) from exc
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                for part in range(0, len(texts), _MOST_PARTS):
                    _write_all(fd, texts[part:part + _MOST_PARTS])
                os.fdatasync(fd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)  # what a failed write left is given back
                raise _error(exc, self.path(stream_id)) from exc
        finally:
            os.close(fd)
        return start


def _write_all(fd: int, texts: list[bytes]) -> None:
    written, total = os.writev(fd, texts), sum(map(len, texts))
    if written < total:  # (a file system may write less than asked: the rest, as one piece)
        rest = memoryview(b"".join(texts))[written:]
        while rest:
            rest = rest[os.write(fd, rest):]


def _error(exc: OSError, path: Path) -> StoreError:
    return store_error("full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "other", str(path), str(exc))
