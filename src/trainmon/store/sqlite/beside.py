"""A SQLite store's large log chunks, kept in files beside its database: ``trainmon.db-logs/``, one
file a log stream, each chunk's packed text appended to it and its row holding where (offset,
length and a fingerprint of the bytes) instead of the text.

Why: a flood of output is stored as chunks of a megabyte or so, packed to a fifth of that. Kept in
the database, each packed byte was written twice, into the write-ahead log and again into the
database when the log was checkpointed, and SQLite copied it into pages on the way: for a gigabyte
of output, 0.55 CPU s in the writer and 0.33 in the checkpoint. Appended to a file it is written
once: the writer takes 0.22 and the checkpoint nothing (docs/architecture.md). A job that prints a
line at a time makes chunks far smaller than :data:`BESIDE_BYTES`, and they stay in the database.

The texts are appended inside the transaction that inserts their rows (the one writer of a stream
holds the database's write lock meanwhile) and reach the disk (``fdatasync``, and the directory's
entry for a new file) before it commits, so a row never refers to bytes a crash could lose; if the
transaction fails, what it appended is cut back off the files (:meth:`Placed.cut_back`). A stream's
file goes with its job, removed inside the transaction that deletes the job, so no stream given the
same number meanwhile can have its file removed. Bytes that are not what the row says (a file made
again for a stream of the same number, files copied from elsewhere) fail the fingerprint, a CRC-32
of the text's first and last :data:`_SEEN` bytes (of all of them it took the writer a sixth of its
time), and read as missing; a database restored beside the same files, which only grow, finds its
chunks where they were. The PostgreSQL store keeps every chunk in the database, which hosts on other
machines share.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from ...errors import StoreError
from ..base import PackedChunk
from ..codec import TEXT_BESIDE
from ..sql import store_error

BESIDE_BYTES = 64 << 10  # a chunk whose packed text is this long or longer is kept beside the database
_WHERE = struct.Struct("<QQI")  # what the row of a chunk kept beside holds: offset, length, fingerprint
_SEEN = 64  # bytes at each end of a text that its fingerprint covers
_MOST_PARTS = 512  # pieces a write is given at once (writev takes at most IOV_MAX)


class Placed(NamedTuple):
    """Chunks as their rows hold them, and where each file written to ended before (to cut it back)."""

    chunks: list[PackedChunk]
    began: list[tuple[Path, int]]

    def cut_back(self) -> None:
        """What was appended given back: the transaction that held the rows failed."""
        for path, size in self.began:
            with contextlib.suppress(OSError):
                os.truncate(path, size)


class LogFiles:
    """The files beside the database at ``database`` (``<name>-logs/``)."""

    def __init__(self, database: Path) -> None:
        self.directory = database.with_name(database.name + "-logs")

    def path(self, stream_id: int) -> Path:
        return self.directory / str(stream_id)

    def place(self, chunks: list[PackedChunk]) -> Placed:
        """The chunks as their rows hold them: the large ones' texts appended to their streams' files
        and on the disk, their rows holding where (flagged :data:`~trainmon.store.codec.TEXT_BESIDE`);
        the others as they are."""
        large: dict[int, list[int]] = {}
        for index, chunk in enumerate(chunks):
            if len(chunk[4]) >= BESIDE_BYTES:
                large.setdefault(chunk[0], []).append(index)
        if not large:  # (a job printing a line at a time: every batch)
            return Placed(chunks, [])
        placed = Placed(list(chunks), [])
        try:
            for stream_id, indexes in large.items():
                at = self._append(stream_id, [chunks[index][4] for index in indexes], placed.began)
                for index in indexes:
                    stream, first, count, stamp, text, packing = chunks[index]
                    where = _WHERE.pack(at, len(text), _fingerprint(text))
                    placed.chunks[index] = (stream, first, count, stamp, where, packing | TEXT_BESIDE)
                    at += len(text)
        except BaseException:
            placed.cut_back()
            raise
        return placed

    def read(self, stream_id: int, where: bytes) -> bytes | None:
        """A chunk's packed text, from where its row says; None when the file no longer holds it (gone,
        shorter, or other bytes there)."""
        offset, length, fingerprint = _WHERE.unpack(where)
        path = self.path(stream_id)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                text = os.pread(fd, length, offset)
            finally:
                os.close(fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _error(exc, path) from exc
        return text if len(text) == length and _fingerprint(text) == fingerprint else None

    def forget(self, stream_ids: Iterable[int]) -> None:
        """The streams' files removed (their job deleted, or a stream given a number whose file was left)."""
        for stream_id in stream_ids:
            with contextlib.suppress(OSError):  # (none, or a store this user may only read)
                os.unlink(self.path(stream_id))

    def _append(self, stream_id: int, texts: list[bytes], began: list[tuple[Path, int]]) -> int:
        """Where ``texts`` begin in the stream's file, appended one after another and on the disk; the
        file and its size before, noted in ``began``."""
        path = self.path(stream_id)
        try:
            try:
                self.directory.mkdir(mode=0o700)
            except FileExistsError:
                pass
            else:
                _sync_directory(self.directory.parent)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise _error(exc, path) from exc
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            began.append((path, start))
            for part in range(0, len(texts), _MOST_PARTS):
                _write_all(fd, texts[part:part + _MOST_PARTS])
            os.fdatasync(fd)
            if not start:
                _sync_directory(self.directory)  # (a new file: its entry too)
        except OSError as exc:
            raise _error(exc, path) from exc
        finally:
            os.close(fd)
        return start


def _fingerprint(text: bytes) -> int:
    return zlib.crc32(text[-_SEEN:], zlib.crc32(text[:_SEEN]))


def _write_all(fd: int, texts: list[bytes]) -> None:
    written, total = os.writev(fd, texts), sum(map(len, texts))
    if written < total:  # (a file system may write less than asked: the rest, as one piece)
        rest = memoryview(b"".join(texts))[written:]
        while rest:
            rest = rest[os.write(fd, rest):]


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _error(exc: OSError, path: Path) -> StoreError:
    return store_error("full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "other", str(path), str(exc))
