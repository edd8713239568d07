"""From a job's pipes to stored log records and metric points.

Two kinds of threads, so that monitoring never holds the job back:

- a :class:`PipeReader` per pipe only reads: each chunk the job wrote is appended to a spool
  file and its arrival time noted. It never waits on the store, the terminal or the extractor,
  so the job's writes never block on trainmon (a full disk moves the spool into memory).
- one :class:`Ingestor` per job cuts the chunks into records, extracts points, echoes to the
  terminal and writes batches to the store, as fast as the store takes them.

A record's timestamp is the wall-clock time (ms) of the read that completed it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import StoreError
from ..parsing.extract import Extractor
from ..parsing.framing import Mode, decode, last_break_end, split_text
from ..store import Batch, Store

READ_BYTES = 1 << 20
MAX_RECORD_BYTES = 16 << 20
STDERR_TAIL_RECORDS = 20
FLUSH_BYTES = 8 << 20
FLUSH_POINTS = 50_000
FINAL_RETRIES = 5


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Chunk:
    start: int
    length: int
    timestamp_ms: int
    data: bytes | None  # kept in memory only when the spool could not be written


class PipeReader(threading.Thread):
    """Drains one pipe into a spool file as fast as the job writes."""

    def __init__(self, fd: int, spool_path: Path, wake: threading.Event, label: str) -> None:
        super().__init__(name=f"trainmon-read-{label}", daemon=True)
        self.fd = fd
        self.spool_path = spool_path
        self.wake = wake
        self.chunks: deque[Chunk] = deque()
        self.spool_error: OSError | None = None
        self.eof = threading.Event()

    def run(self) -> None:
        offset = 0
        spool_fd = os.open(self.spool_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        try:
            while True:
                try:
                    data = os.read(self.fd, READ_BYTES)
                except OSError:
                    data = b""
                if not data:
                    break
                stamp = now_ms()
                kept: bytes | None = data
                if self.spool_error is None:
                    try:
                        _write_all(spool_fd, data)
                        kept = None
                    except OSError as exc:
                        self.spool_error = exc
                self.chunks.append(Chunk(offset, len(data), stamp, kept))
                if kept is None:
                    offset += len(data)
                self.wake.set()
        finally:
            os.close(spool_fd)
            os.close(self.fd)
            self.eof.set()
            self.wake.set()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class RecordCutter:
    """Cuts a byte stream into blocks of whole records, keeping the unfinished tail."""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._skip_newline = False
        self.forced_cuts = 0

    def feed(self, data: bytes) -> bytes:
        if self._skip_newline and data:
            self._skip_newline = False
            if data[:1] == b"\n":  # the second half of a "\r\n" split across two reads
                data = data[1:]
        cut = last_break_end(data, self.mode)
        if cut == 0:
            self._pending.append(data)
            self._pending_bytes += len(data)
            if self._pending_bytes < MAX_RECORD_BYTES:
                return b""
            self.forced_cuts += 1
            return self.finish()
        block = b"".join([*self._pending, data[:cut]])
        rest = data[cut:]
        self._pending = [rest] if rest else []
        self._pending_bytes = len(rest)
        if self.mode.splits_on_cr and not rest and block[-1:] == b"\r":
            self._skip_newline = True  # the read ended on "\r": a "\n" may follow in the next one
        return block

    def finish(self) -> bytes:
        block = b"".join(self._pending)
        self._pending, self._pending_bytes = [], 0
        return block


@dataclass
class Pipe:
    reader: PipeReader
    cutter: RecordCutter
    is_stderr: bool
    spool: BinaryIO | None = None
    bytes_read: int = 0
    bytes_stored: int = 0


@dataclass
class HostStream:
    host: str
    stream_id: int
    pipes: list[Pipe]
    next_seq: int = 0
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_RECORDS))


class Echo:
    """Shows the job's output on the terminal (host-prefixed when several) and, optionally, each
    point right after the line it came from (never in the middle of a progress bar)."""

    def __init__(self, *, prefix_hosts: bool, live_metrics: bool) -> None:
        self.prefix_hosts = prefix_hosts
        self.live_metrics = live_metrics
        self.color = sys.stdout.isatty()
        self._at_line_start = True
        self._pending_points: list[str] = []

    def records(self, host: str, is_stderr: bool, records: list[str]) -> None:
        """Several hosts: whole records, each prefixed by its host, then the points."""
        self._write(is_stderr, "".join(f"{host} | {record}\n" for record in records).encode())
        self.flush_points()

    def passthrough(self, is_stderr: bool, data: bytes) -> None:
        """One host: the bytes as the job wrote them; points go after the last complete line."""
        cut = data.rfind(b"\n") + 1
        if cut:
            self._write(is_stderr, data[:cut])
            if not is_stderr:
                self._at_line_start = True
        self.flush_points()
        if cut < len(data):
            self._write(is_stderr, data[cut:])
            if not is_stderr:
                self._at_line_start = False

    def _write(self, is_stderr: bool, data: bytes) -> None:
        target = sys.stderr if is_stderr else sys.stdout
        try:
            target.flush()
            target.buffer.write(data)
            target.flush()
        except (OSError, ValueError):
            pass  # a closed terminal must not stop the capture

    def point(self, name: str, value: float, host: str, seq: int) -> None:
        if not self.live_metrics:
            return
        text = f"  » {name} = {value:g}   ({host}, record {seq + 1})"
        self._pending_points.append(f"\x1b[2m{text}\x1b[0m" if self.color else text)

    def flush_points(self) -> None:
        if self._pending_points and (self._at_line_start or self.prefix_hosts):
            self._write(False, ("\n".join(self._pending_points) + "\n").encode())
            self._pending_points.clear()


class Ingestor(threading.Thread):
    """Turns the readers' chunks into stored records and points, in batches."""

    def __init__(
        self,
        store: Store,
        job_id: int,
        streams: list[HostStream],
        extractor: Extractor,
        wake: threading.Event,
        echo: Echo | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(name="trainmon-ingest", daemon=True)
        self.store = store
        self.job_id = job_id
        self.streams = streams
        self.extractor = extractor
        self.wake = wake
        self.echo = echo
        self.on_error = on_error or (lambda message: print(f"trainmon: {message}", file=sys.stderr))
        self._finishing = threading.Event()
        self._pending = Batch(job_id)
        self.store_error: StoreError | None = None  # set while the store refuses writes
        self.failure: BaseException | None = None
        self.points_written = 0
        self.unsaved: tuple[int, int] | None = None  # (records, points) the store never took
        self._names = [d.name for d in extractor.definitions]

    def finish(self, timeout_s: float | None = None) -> None:
        """Ask the thread to drain what is left (once every reader hit EOF) and wait for it."""
        self._finishing.set()
        self.wake.set()
        self.join(timeout_s)

    def run(self) -> None:
        try:
            while True:
                self.wake.wait(0.25)
                self.wake.clear()
                done = self._finishing.is_set() and all(p.reader.eof.is_set() for s in self.streams for p in s.pipes)
                self._step(final=done)
                if done:
                    for _ in range(FINAL_RETRIES):
                        if not self._pending:
                            break
                        time.sleep(1.0)
                        self._flush()
                    if self._pending:
                        self.unsaved = (sum(c[2] for c in self._pending.chunks), len(self._pending.points))
                    break
        except BaseException as exc:  # reported by the supervisor; the readers keep draining
            self.failure = exc
            self.on_error(f"log ingestion stopped: {exc}")

    def _step(self, *, final: bool) -> None:
        work: list[tuple[int, int, HostStream, Pipe, Chunk]] = []
        order = 0
        for stream in self.streams:
            for pipe in stream.pipes:
                while pipe.reader.chunks:
                    chunk = pipe.reader.chunks.popleft()
                    work.append((chunk.timestamp_ms, order, stream, pipe, chunk))
                    order += 1
        work.sort(key=lambda item: (item[0], item[1]))
        for stamp, _, stream, pipe, chunk in work:
            data = chunk.data if chunk.data is not None else self._read_spool(pipe, chunk)
            pipe.bytes_read += len(data)
            self._ingest(stream, pipe, pipe.cutter.feed(data), stamp, data)
        if final:
            stamp = now_ms()
            for stream in self.streams:
                for pipe in stream.pipes:
                    block = pipe.cutter.finish()
                    if block:
                        self._ingest(stream, pipe, block, stamp, b"")
        if work or final:
            self._pending.diagnostics = [s.to_json() for s in self.extractor.stats]
        self._flush()

    def _read_spool(self, pipe: Pipe, chunk: Chunk) -> bytes:
        if pipe.spool is None:
            pipe.spool = open(pipe.reader.spool_path, "rb")  # noqa: SIM115 - closed in close()
        pipe.spool.seek(chunk.start)
        return pipe.spool.read(chunk.length)

    def _ingest(self, stream: HostStream, pipe: Pipe, block: bytes, stamp: int, raw: bytes) -> None:
        if not block:
            if self.echo and raw and not self.echo.prefix_hosts:
                self.echo.passthrough(pipe.is_stderr, raw)
            return
        extractor = self.extractor
        text = decode(block)
        if extractor.mode.splits_on_cr and "\r" in text:
            text = "\n".join(split_text(text, extractor.mode))
        elif text.endswith("\n"):
            text = text[:-1]
        count = extractor.count_records(block)
        first = stream.next_seq
        batch = self._pending
        batch.chunks.append((stream.stream_id, first, count, stamp, text))
        batch.text_bytes += len(block)
        names = self._names
        host, stream_id = stream.host, stream.stream_id
        for record, _offset, definition, value in extractor.scan(block):
            batch.points.append((names[definition], stamp, None if value != value else value, host, stream_id,
                                 first + record))
            if self.echo:
                self.echo.point(names[definition], value, host, first + record)
        if self.echo:
            if self.echo.prefix_hosts:
                self.echo.records(host, pipe.is_stderr, text.split("\n"))
            elif raw:
                self.echo.passthrough(pipe.is_stderr, raw)
            else:
                self.echo.flush_points()
        stream.next_seq += count
        previous = batch.stream_stats.get(stream.stream_id, (0, 0, stamp))
        batch.stream_stats[stream.stream_id] = (previous[0] + count, previous[1] + self._unstored_bytes(pipe),
                                                stamp)
        if pipe.is_stderr:
            stream.stderr_tail.extend(text.rsplit("\n", STDERR_TAIL_RECORDS)[-STDERR_TAIL_RECORDS:])
        if batch.text_bytes >= FLUSH_BYTES or len(batch.points) >= FLUSH_POINTS:
            self._flush()

    @staticmethod
    def _unstored_bytes(pipe: Pipe) -> int:
        """Bytes read from the pipe since the last stored block (what was read, "\r\n" split or not)."""
        counted = pipe.bytes_read - pipe.bytes_stored
        pipe.bytes_stored = pipe.bytes_read
        return counted

    def _flush(self) -> None:
        if not self._pending:
            return
        try:
            self.store.write_batch(self._pending)
        except StoreError as exc:
            if self.store_error is None:
                self.on_error(f"{exc.message}. Keeping the job's output in memory and retrying.")
            self.store_error = exc
            return
        if self.store_error is not None:
            self.on_error("the store accepts writes again; nothing was lost.")
        self.store_error = None
        self.points_written += len(self._pending.points)
        self._pending = Batch(self.job_id)

    def close(self) -> None:
        for stream in self.streams:
            for pipe in stream.pipes:
                if pipe.spool is not None:
                    pipe.spool.close()
                try:
                    pipe.reader.spool_path.unlink()
                except OSError:
                    pass
