"""Columns of a time series in one blob: packed as written, sealed (compressed) once still.

A chunk is a few equal-length columns (int64 or float64 numpy arrays): a job's points are
(timestamp_ms, value, seq), a metric's datapoints (timestamp_ms, value, count, sum, minimum,
maximum). Writers *pack* them: the columns' bytes, no work per point, so ingestion runs at
memory speed. Maintenance later *seals* a series' packed chunks into larger ones, encoded the
way time-series databases encode what no longer changes, then zstd-compressed:

- integers (timestamps, record numbers) as deltas from the previous value, in the smallest
  integer type that holds them: a point a second costs about a byte;
- floats that are decimals (a log prints ``loss=0.2345``, so the parsed double is the double
  nearest 2345/10**4) as those scaled integers, delta-encoded, with the places of any -0.0:
  lossless, because the decoded ``ints / 10**k`` is checked to give back every value bit for bit
  before this encoding is used;
- a float column equal to an earlier one (a single value's sum, minimum and maximum) as a
  reference to it;
- any other float column with its bytes split into planes (all first bytes, then all second
  bytes...), which zstd compresses far better than interleaved doubles.

Unpacking either form gives the same arrays back exactly (NaN payloads included).
"""

from __future__ import annotations

import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import zstandard

PACKED, SEALED = 1, 2
_INT, _FLOAT = 0, 1  # a packed column's type
_DELTA, _DECIMAL, _SAME, _SPLIT = 0, 1, 2, 3  # a sealed column's encoding
_NEGATIVE_ZEROS = struct.Struct("<I")  # a decimal column's body starts with where -0.0 is
_HEAD = struct.Struct("<BIB")  # format, rows, columns
_PACKED_COLUMN = struct.Struct("<B")
_SEALED_COLUMN = struct.Struct("<BBqI")  # encoding, parameter, first value, encoded bytes
# parameter: the delta width's index (and, for decimals, the digits above it), or the column referred to
_WIDTHS = (np.int8, np.int16, np.int32, np.int64)
_MAX_EXACT = 2.0**53
_LEVEL = 3
_zstd = threading.local()  # zstandard's (de)compressors may not be used by two threads at once


def _compressor() -> zstandard.ZstdCompressor:
    if not hasattr(_zstd, "compressor"):
        _zstd.compressor = zstandard.ZstdCompressor(level=_LEVEL)
    return _zstd.compressor  # type: ignore[no-any-return]


def _text_compressor() -> zstandard.ZstdCompressor:
    """Level 1 for log text: as small as level 3 on logs (within 1%), a third faster."""
    if not hasattr(_zstd, "text_compressor"):
        _zstd.text_compressor = zstandard.ZstdCompressor(level=1)
    return _zstd.text_compressor  # type: ignore[no-any-return]


def _decompressor() -> zstandard.ZstdDecompressor:
    if not hasattr(_zstd, "decompressor"):
        _zstd.decompressor = zstandard.ZstdDecompressor()
    return _zstd.decompressor  # type: ignore[no-any-return]


# -- log text ------------------------------------------------------------------------------

TEXT_AS_IS, TEXT_ZSTD = 0, 1  # how a log chunk's text is stored (log_chunks.packing)
TEXT_CR_BREAKS = 2  # (a flag beside either) its "\r" are record breaks, kept as read: each is a "\n" read back
TEXT_BESIDE = 4  # (a flag) its packed text is in a file beside the database, the row holding where (store.sqlite.beside)
PACK_TEXT_BYTES = 512  # a shorter chunk (a line or a few) is stored as it is: a zstd frame would not pay


class CrBreaks(NamedTuple):
    """A log chunk's records as read in a mode that splits at "\\r" as well as "\\n", holding no
    "\\r\\n": stored so, flagged (TEXT_CR_BREAKS), and read back with each "\\r" a "\\n", as the text
    of any other chunk is joined. Turning them into "\\n" as a flood is captured was a copy of every
    byte and a search per "\\r"; a chunk read back costs that instead (most are never read)."""

    raw: bytes | memoryview


Text = str | bytes | memoryview | CrBreaks


def pack_text(text: Text) -> tuple[bytes, int]:
    """A log chunk's records (UTF-8, as read: invalid bytes are replaced when read back) as stored,
    and how: zstd-compressed when that makes it smaller. Logs compress about five times, so a flood
    costs the store a fifth of its bytes, and the compression runs without Python's lock."""
    return _packed(*_bytes_of(text))


def _bytes_of(text: Text) -> tuple[bytes | memoryview, int]:
    """A text's bytes, and the flags its stored form carries."""
    if isinstance(text, CrBreaks):
        return text.raw, TEXT_CR_BREAKS
    return (text.encode("utf-8") if isinstance(text, str) else text), 0


def _smaller(data: bytes | memoryview, packed: bytes, flags: int) -> tuple[bytes, int]:
    """A text as stored, with its flags: its compressed form if that is smaller, else the text as it is."""
    return (packed, TEXT_ZSTD | flags) if len(packed) < len(data) else (bytes(data), TEXT_AS_IS | flags)


PARALLEL_PACK_BYTES = 64 << 10  # texts from this size on are compressed on the packing threads


class PackedTexts:
    """:func:`pack_text` of each text, the large ones (PARALLEL_PACK_BYTES) begun at once on the
    packing threads, one a core (zstd lets go of Python's lock): a flood's batch is mostly a few
    large texts and compressing them is most of what storing them costs, so a writer that begins
    packing a batch as it is queued compresses it on the cores the ingestor leaves idle while it
    stores the batch before. :meth:`result` waits for them."""

    def __init__(self, texts: Sequence[Text]) -> None:
        self._parts = [_bytes_of(text) for text in texts]
        self._packing: dict[int, Future[bytes]] = {}
        for index, (data, _) in enumerate(self._parts):
            if len(data) >= PARALLEL_PACK_BYTES:
                try:
                    self._packing[index] = _packing_threads().submit(_compressed_text, data)
                except RuntimeError:  # (the interpreter is exiting, or no thread can be started: the rest
                    break  # is packed by result(), on the caller's thread)

    def done(self) -> bool:
        """Whether every text begun on the packing threads is compressed."""
        return all(future.done() for future in self._packing.values())

    def result(self) -> list[tuple[bytes, int]]:
        return [_smaller(data, self._packing[index].result(), flags) if index in self._packing
                else _packed(data, flags) for index, (data, flags) in enumerate(self._parts)]


def _packed(data: bytes | memoryview, flags: int) -> tuple[bytes, int]:
    if len(data) < PACK_TEXT_BYTES:
        return bytes(data), TEXT_AS_IS | flags
    return _smaller(data, _compressed_text(data), flags)


def _compressed_text(data: bytes | memoryview) -> bytes:
    return _text_compressor().compress(data)


PACKING_THREADS = 8  # at most (each keeps a compressor of its own, about 1.4 MB)
_threads: ThreadPoolExecutor | None = None
_threads_lock = threading.Lock()


def _packing_threads() -> ThreadPoolExecutor:
    """The process's packing threads, one for each core it may run on (up to PACKING_THREADS), started
    as they are first needed by the thread that submits: a capture's are scheduled as its ingestor
    is, below the job."""
    global _threads
    with _threads_lock:
        if _threads is None:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            _threads = ThreadPoolExecutor(max_workers=min(cores, PACKING_THREADS), thread_name_prefix="trainmon-pack")
        return _threads


def _forget_packing_threads() -> None:
    global _threads, _threads_lock
    _threads, _threads_lock = None, threading.Lock()  # a forked child has none of its parent's threads


os.register_at_fork(after_in_child=_forget_packing_threads)


def unpack_text(stored: str | bytes | memoryview, packing: int) -> str:
    """A stored log chunk's text (a chunk written before packing existed may be text already)."""
    if isinstance(stored, str):
        return stored
    data = _decompressor().decompress(stored) if packing & TEXT_ZSTD else bytes(stored)
    if packing & TEXT_CR_BREAKS:
        data = data.replace(b"\r", b"\n")
    return data.decode("utf-8", "replace")


# -- columns -------------------------------------------------------------------------------


def pack(columns: Sequence[np.ndarray]) -> bytes:
    """The columns as they are (int64 or float64), for the write path."""
    rows = len(columns[0]) if columns else 0
    parts = [_HEAD.pack(PACKED, rows, len(columns))]
    for column in columns:
        kind = _INT if column.dtype.kind in "iu" else _FLOAT
        parts.append(_PACKED_COLUMN.pack(kind))
        parts.append(np.ascontiguousarray(column, dtype=np.int64 if kind == _INT else np.float64).tobytes())
    return b"".join(parts)


def seal(columns: Sequence[np.ndarray]) -> bytes:
    """The columns encoded and compressed; ``unpack`` gives them back exactly."""
    rows = len(columns[0]) if columns else 0
    header = [_HEAD.pack(SEALED, rows, len(columns))]
    bodies: list[bytes] = []
    for index, column in enumerate(columns):
        if column.dtype.kind in "iu":
            encoding, parameter, first, body = _DELTA, *_deltas(column.astype(np.int64))
        else:
            encoding, parameter, first, body = _float_column(column.astype(np.float64), columns[:index])
        header.append(_SEALED_COLUMN.pack(encoding, parameter, first, len(body)))
        bodies.append(body)
    return bytes([SEALED]) + _compressor().compress(b"".join(header + bodies))


def unpack(blob: bytes) -> list[np.ndarray]:
    """The columns of a packed or sealed chunk."""
    if blob[0] == SEALED:
        return _unseal(_decompressor().decompress(blob[1:]))
    _, rows, count = _HEAD.unpack_from(blob)
    offset = _HEAD.size
    columns = []
    for _ in range(count):
        (kind,) = _PACKED_COLUMN.unpack_from(blob, offset)
        offset += _PACKED_COLUMN.size
        columns.append(np.frombuffer(blob, np.int64 if kind == _INT else np.float64, rows, offset))
        offset += rows * 8
    return columns


class Decoded:
    """:func:`unpack` with the columns of the chunks read lately kept by their bytes, up to
    ``budget`` bytes (theirs and their columns'), the least recently read given up first. A chunk's
    bytes are all its decoding depends on, so a chunk read again (a running job's recent points at
    every statistics request and live poll, a compared job's overviews at every page) is taken as
    it was decoded, and what is rewritten (sealed, merged) is other bytes: nothing kept can be out
    of date. The columns kept are read-only, shared by whoever reads that chunk. With a budget of
    0 (a process's default: a job's supervisor need not hold its points twice), every chunk is
    decoded each time; a server gives it one."""

    def __init__(self, budget: int = 0) -> None:
        self.budget = budget
        self._kept: OrderedDict[bytes, tuple[tuple[np.ndarray, ...], int]] = OrderedDict()  # columns, their size
        self._held = 0
        self._lock = threading.Lock()

    def __call__(self, blob: bytes) -> list[np.ndarray]:
        if not self.budget:
            return unpack(blob)
        hash(blob)  # (computed once, outside the lock: a bytes object keeps its hash)
        with self._lock:
            kept = self._kept.get(blob)
            if kept is not None:
                self._kept.move_to_end(blob)
                return list(kept[0])
        return self._decode(blob)

    def joined(self, blobs: Sequence[bytes]) -> Sequence[np.ndarray]:
        """The columns of chunks of one layout, joined in order (one chunk's as they are): those kept
        found under one taking of the lock, as a running job's hundreds of recent chunks are at
        every statistics request."""
        if not self.budget:
            parts: list[Sequence[np.ndarray]] = [unpack(blob) for blob in blobs]
        else:
            for blob in blobs:
                hash(blob)
            kept = self._kept
            with self._lock:
                found = [kept.get(blob) for blob in blobs]
                for blob, known in zip(blobs, found, strict=True):
                    if known is not None:
                        kept.move_to_end(blob)
            parts = [self._decode(blob) if known is None else known[0] for blob, known in zip(blobs, found, strict=True)]
        return parts[0] if len(parts) == 1 else [np.concatenate(column) for column in zip(*parts, strict=True)]

    def _decode(self, blob: bytes) -> list[np.ndarray]:
        columns = unpack(blob)
        for column in columns:
            column.setflags(write=False)
        size = len(blob) + sum(column.nbytes for column in columns)
        if size > self.budget // 16:  # (a chunk this large is decoded again, not kept at others' expense)
            return columns
        with self._lock:
            if blob not in self._kept:
                self._kept[blob] = tuple(columns), size
                self._held += size
                while self._held > self.budget:
                    self._held -= self._kept.popitem(last=False)[1][1]
        return columns


decoded = Decoded()  # the readers' of this process


def _unseal(data: bytes) -> list[np.ndarray]:
    _, rows, count = _HEAD.unpack_from(data)
    specs = [_SEALED_COLUMN.unpack_from(data, _HEAD.size + i * _SEALED_COLUMN.size) for i in range(count)]
    offset = _HEAD.size + count * _SEALED_COLUMN.size
    columns: list[np.ndarray] = []
    for encoding, parameter, first, size in specs:
        body = data[offset:offset + size]
        offset += size
        if encoding == _SAME:
            columns.append(columns[parameter])
        elif encoding == _SPLIT:
            planes = np.frombuffer(body, np.uint8).reshape(8, rows)
            columns.append(np.ascontiguousarray(planes.T).view(np.float64).reshape(rows))
        elif encoding == _DELTA:
            columns.append(_undelta(body, parameter & 3, first, rows))
        else:
            (zeros,) = _NEGATIVE_ZEROS.unpack_from(body)
            start = _NEGATIVE_ZEROS.size + 4 * zeros
            values = _undelta(body[start:], parameter & 3, first, rows) / 10.0 ** (parameter >> 2)
            values[np.frombuffer(body, np.uint32, zeros, _NEGATIVE_ZEROS.size)] = -0.0
            columns.append(values)
    return columns


def _deltas(ints: np.ndarray) -> tuple[int, int, bytes]:
    """(width index, first value, the deltas in the narrowest type that holds them)."""
    if len(ints) == 0:
        return 0, 0, b""
    steps = np.diff(ints)
    low, high = (int(steps.min()), int(steps.max())) if len(steps) else (0, 0)
    for width, kind in enumerate(_WIDTHS):
        bits = 8 << width
        if -(1 << (bits - 1)) <= low and high < 1 << (bits - 1):
            return width, int(ints[0]), steps.astype(kind).tobytes()
    raise AssertionError("int64 deltas always fit")  # pragma: no cover


def _undelta(body: bytes, width: int, first: int, rows: int) -> np.ndarray:
    if rows == 0:
        return np.zeros(0, np.int64)
    out = np.empty(rows, np.int64)
    out[0] = first
    np.cumsum(np.frombuffer(body, _WIDTHS[width]), dtype=np.int64, out=out[1:])
    out[1:] += first
    return out


def _float_column(values: np.ndarray, earlier: Sequence[np.ndarray]) -> tuple[int, int, int, bytes]:
    for index, other in enumerate(earlier):
        if other.dtype == np.float64 and len(other) == len(values) and _identical(other, values):
            return _SAME, index, 0, b""
    if len(values) and np.isfinite(values).all():
        negative_zeros = np.flatnonzero((values == 0) & np.signbit(values))  # a printed "-0.0000"
        for digits in range(16):
            scale = 10.0**digits
            rounded = np.rint(values * scale)
            if np.abs(rounded).max() >= _MAX_EXACT:
                break
            ints = rounded.astype(np.int64)
            decoded = ints / scale
            decoded[negative_zeros] = -0.0
            if _identical(decoded, values):
                width, first, body = _deltas(ints)
                if width < 3 or digits == 0:
                    zeros = negative_zeros.astype(np.uint32)
                    return _DECIMAL, digits << 2 | width, first, _NEGATIVE_ZEROS.pack(len(zeros)) + zeros.tobytes() + body
                break  # wide deltas: the byte planes compress better
    planes = np.ascontiguousarray(values.view(np.uint8).reshape(len(values), 8).T)
    return _SPLIT, 0, 0, planes.tobytes()


def _identical(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit (so -0.0 and 0.0, or two NaNs with different payloads, differ)."""
    return bool(np.array_equal(a.view(np.int64), b.view(np.int64)))
