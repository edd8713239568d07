"""From a job's pipes to stored log records and metric points.

Two kinds of threads, so that monitoring never holds the job back:

- a :class:`PipeReader` per pipe only reads: each chunk the job wrote is appended to the pipe's
  spool file, framed with its read time, and noted for the ingestor. It never waits on the
  store, the terminal or the extractor, so the job's writes never block on trainmon. When the
  spool cannot be written (a full disk), chunks are kept in memory, up to ``MEMORY_CAP_BYTES``
  for the whole job; past that they are counted (bytes, records, points) and dropped, so memory
  stays bounded and the loss is recorded on the job, never silent.
- one :class:`Ingestor` per job cuts the chunks into records, extracts points, echoes to the
  terminal and writes batches to the store, as fast as the store takes them. When the store
  refuses (a server down, a lock, a full disk), the batch is kept and written again with
  backoff, and the ingestor takes no new chunks meanwhile: the backlog waits in the spool, on
  disk. Each batch records how far each spool was consumed (``Batch.spools``), in the same
  transaction, so whoever ingests a spool left by a dead supervisor starts where it stopped
  (:mod:`trainmon.runtime.recovery`).

A record's timestamp is the wall-clock time (ms) of the read that completed it.
"""

from __future__ import annotations

import os
import select
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from ..errors import StoreError, StoreFull
from ..jobs.document import UnstoredOutput
from ..parsing.definitions import MetricDefinition
from ..parsing.extract import Extractor
from ..parsing.framing import Mode, decode, last_break_end
from ..store import Batch, PointBlock, Store
from .retry import FULL_DISK_TRIES, Backoff

READ_BYTES = 1 << 20
MAX_RECORD_BYTES = 16 << 20
STDERR_TAIL_RECORDS = 20
STDERR_TAIL_BYTES = 64 << 10  # of a block, what the stderr tail is taken from
FLUSH_BYTES = 8 << 20
FLUSH_POINTS = 50_000
MEMORY_CAP_BYTES = 64 << 20  # output held in memory when the spool cannot be written, for the whole job
OPEN_RECORD_BYTES = 64 << 10  # of a record a drop starts in: what is matched with its dropped rest
POLL_MS = 200
SPOOL_RETRY_MS = 1000  # a spool that could not be written is tried again this often
FRAME = struct.Struct("<qI")  # a spool frame's header: read time (ms), length; the bytes follow


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def pipe_name(is_stderr: bool) -> str:
    return "stderr" if is_stderr else "stdout"


def spool_path(directory: Path, host: str, is_stderr: bool) -> Path:
    """The spool file of a host's stdout or stderr, in the job's spool directory."""
    return directory / f"{host}-{pipe_name(is_stderr)}"


def spool_files(directory: Path) -> Iterator[Path]:
    """Every spool file in a job's spool directory (the names :func:`spool_path` gives)."""
    return directory.glob("*-std*")


@dataclass(frozen=True, slots=True)
class Chunk:
    start: int  # offset of the chunk's bytes in the spool file (where they would be, when in memory)
    length: int
    timestamp_ms: int
    data: bytes | None  # kept in memory only when the spool could not be written
    cut: bool = False  # no bytes: output was dropped here, so the record in progress ends here
    after_cr: bool = False  # with ``cut``: the output taken up again right after a "\r"


class MemoryBudget:
    """Bytes of output held in memory for lack of a spool, across a job's readers."""

    def __init__(self, cap_bytes: int = MEMORY_CAP_BYTES) -> None:
        self.cap_bytes = cap_bytes
        self._lock = threading.Lock()
        self.held_bytes = 0

    def take(self, size: int) -> bool:
        with self._lock:
            if self.held_bytes + size > self.cap_bytes:
                return False
            self.held_bytes += size
            return True

    def give_back(self, size: int) -> None:
        with self._lock:
            self.held_bytes -= size


@dataclass
class Loss:
    """What never reached the store: counted as it is dropped."""

    records: int = 0
    points: int = 0
    bytes: int = 0
    reason: str = ""

    def add(self, other: Loss) -> None:
        self.records += other.records
        self.points += other.points
        self.bytes += other.bytes
        self.reason = self.reason or other.reason

    def unstored(self) -> UnstoredOutput | None:
        """The job document's record of the loss; None when nothing was lost."""
        if not (self.bytes or self.records):
            return None
        return {"Records": self.records, "Points": self.points, "Bytes": self.bytes, "Reason": self.reason}


def count_block(extractor: Extractor, block: bytes) -> Loss:
    """The records of a block of whole records and the points they hold, as lost."""
    if not block:
        return Loss()
    points = len(extractor.scan_columns(block).records)
    return Loss(extractor.count_records(block), points)


class LossCounter:
    """Counts the records and points of output that has to be dropped, in the reader's thread (its
    own cutter and extractor: the ingestor's are not shared).

    Where a drop starts or ends in the middle of a record, the ingestor stores the part that was
    kept as a record, so the counter counts no record there, and as points the record's points less
    those of the part stored (what the whole record holds is found by matching it whole: the kept
    part, up to ``OPEN_RECORD_BYTES`` of it, with the dropped one). Every record is counted once,
    stored or not, and so is every point."""

    def __init__(self, definitions: Sequence[MetricDefinition], mode: Mode) -> None:
        self.definitions = definitions
        self.cutter = RecordCutter(mode)
        self.loss = Loss()
        self._extractor: Extractor | None = None
        self._kept_start: bytes | None = None  # the stored start of the record the drop began in

    @property
    def extractor(self) -> Extractor:
        """Built when output is first dropped (its definitions compiled): most jobs never drop any."""
        if self._extractor is None:
            self._extractor = Extractor(self.definitions, self.cutter.mode)
        return self._extractor

    def begin(self, last_kept: bytes, open_record: bytes, reason: str) -> None:
        """Dropping starts, for ``reason``, after kept output whose last byte was ``last_kept`` and
        whose record in progress (stored as a record of its own by the ingestor) is ``open_record``."""
        mode = self.cutter.mode
        self.cutter.restart(after_cr=last_kept == b"\r" and mode.splits_on_cr)
        self._kept_start = None if _ends_record(last_kept, mode) else open_record
        self.loss.reason = self.loss.reason or reason

    def drop(self, data: bytes) -> None:
        self._count(self.cutter.feed(data))
        self.loss.bytes += len(data)

    def end(self, kept: bytes) -> bool:
        """Dropping ends, and ``kept`` is kept: its first record's start was dropped (the ingestor
        stores the rest as a record). Whether the dropped output ended just after a "\r"."""
        after_cr = self.cutter.after_cr
        dropped = self.cutter.finish()
        if dropped or self._kept_start is not None:
            start = self._kept_start or b""
            rest = kept[:_first_break(kept, self.cutter.mode)]
            self.loss.points += (self._points(start + dropped + rest) - self._points(rest)
                                 - (self._points(start) if self._kept_start is not None else 0))
        self._kept_start = None
        return after_cr

    def finish(self) -> None:
        self._count(self.cutter.finish())

    def _count(self, block: bytes) -> None:
        if not block:
            return
        loss = count_block(self.extractor, block)
        if self._kept_start is not None:  # the first record's start was stored: the record counts there
            rest = block[:_first_break(block, self.cutter.mode)]
            loss.records -= 1
            loss.points += self._points(self._kept_start + rest) - self._points(self._kept_start) - self._points(rest)
            self._kept_start = None
        self.loss.add(loss)

    def _points(self, record: bytes) -> int:
        return len(self.extractor.scan_columns(record).records) if record else 0


def _first_break(data: bytes, mode: Mode) -> int:
    """Where the first record of ``data`` ends (its length when it holds no break)."""
    ends = [end for end in (data.find(b"\n"), data.find(b"\r") if mode.splits_on_cr else -1) if end != -1]
    return min(ends, default=len(data))


class PipeReader(threading.Thread):
    """Drains one pipe into its spool file as fast as the job writes; ``preamble`` (whole lines
    trainmon has to say about the job, in its log) comes first, as if the job had written it."""

    def __init__(self, fd: int, spool_path: Path, wake: threading.Event, label: str, *, budget: MemoryBudget,
                 losses: LossCounter, preamble: bytes = b"") -> None:
        super().__init__(name=f"trainmon-read-{label}", daemon=True)
        self.fd = fd
        self.preamble = preamble
        self.spool_path = spool_path
        self.wake = wake
        self.budget = budget
        self.losses = losses
        self.chunks: deque[Chunk] = deque()
        self.spool_error: OSError | None = None
        self.eof = threading.Event()
        self._abandon = threading.Event()
        self._spool_fd = -1
        self._spool_retry_ms = 0
        self._dropping = False
        self._last_kept = b"\n"
        self._open_record = b""  # the kept output's record in progress (its last OPEN_RECORD_BYTES)

    def abandon(self) -> None:
        """Stop reading (what is still in the pipe is not read): for a pipe whose writers will not
        close it, once the job is over."""
        self._abandon.set()

    def run(self) -> None:
        os.set_blocking(self.fd, False)
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLHUP)
        offset = FRAME.size
        try:
            self._spool_fd = self._open_spool()
        except OSError as exc:
            self.spool_error = exc  # tried again with the first read, as a spool that cannot be written
        if self.preamble:
            offset = self._keep(self.preamble, offset)
        try:
            while True:
                try:
                    data = os.read(self.fd, READ_BYTES)
                except BlockingIOError:
                    if self._abandon.is_set():
                        break
                    poller.poll(POLL_MS)
                    continue
                except OSError:
                    data = b""
                if not data:
                    break
                offset = self._keep(data, offset)
        finally:
            if self._spool_fd >= 0:
                os.close(self._spool_fd)
            os.close(self.fd)
            self.losses.finish()
            self.eof.set()
            self.wake.set()

    def _open_spool(self) -> int:
        return os.open(self.spool_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)

    def _keep(self, data: bytes, offset: int) -> int:
        """Spool one read (or hold it in memory, or count it lost); the spool offset after it."""
        stamp = now_ms()
        if self.spool_error is None or stamp >= self._spool_retry_ms:
            try:
                if self._spool_fd < 0:  # it could not be opened
                    self._spool_fd = self._open_spool()
                _write_all(self._spool_fd, FRAME.pack(stamp, len(data)), data)
                self._kept(Chunk(offset, len(data), stamp, None), data)
                self.spool_error = None
                return offset + len(data) + FRAME.size
            except OSError as exc:
                self.spool_error = exc
                self._spool_retry_ms = stamp + SPOOL_RETRY_MS
                if self._spool_fd >= 0:  # no frame cut short: the next one follows the last whole one
                    _truncate(self._spool_fd, offset - FRAME.size)
        if self.budget.take(len(data)):
            self._kept(Chunk(offset, len(data), stamp, data), data)
            return offset
        if not self._dropping:
            self._dropping = True
            self.losses.begin(self._last_kept, self._open_record, f"the job's spool could not be written ({self.spool_error}) and the "
                              f"{self.budget.cap_bytes >> 20} MiB of output trainmon holds in memory meanwhile were full")
            self.chunks.append(Chunk(offset, 0, stamp, b"", cut=True))
        self.losses.drop(data)
        return offset

    def _kept(self, chunk: Chunk, data: bytes) -> None:
        if self._dropping:
            self._dropping = False
            self.chunks.append(Chunk(chunk.start, 0, chunk.timestamp_ms, b"", cut=True,
                                     after_cr=self.losses.end(data)))
        self.chunks.append(chunk)
        self._last_kept = data[-1:]
        cut = last_break_end(data, self.losses.cutter.mode)
        self._open_record = data[cut:] if cut else (self._open_record + data)[-OPEN_RECORD_BYTES:]
        self.wake.set()


def stored_text(block: bytes, mode: Mode) -> bytes | memoryview:
    """A block of whole records as a log chunk holds them: joined by "\\n" (a "\\r" or "\\r\\n" break is
    one too in the modes that split there), without the last record's break (a view: no copy)."""
    if mode.splits_on_cr and b"\r" in block:
        block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return memoryview(block)[:-1] if block.endswith(b"\n") else block


def _ends_record(last: bytes, mode: Mode) -> bool:
    return last == b"\n" or (last == b"\r" and mode.splits_on_cr)


def _truncate(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, max(0, size))
    except OSError:
        pass


def _write_all(fd: int, header: bytes, data: bytes) -> None:
    """Both parts, whole: a frame is only ever followed by its bytes."""
    written = os.writev(fd, [header, data])
    if written < len(header) + len(data):
        rest = memoryview(header + data)[written:]
        while rest:
            rest = rest[os.write(fd, rest):]


def spool_frames(path: Path, from_offset: int) -> Iterator[tuple[int, int, int]]:
    """(offset, read time in ms, length) of a spool file's chunks from ``from_offset`` on; a chunk
    that ``from_offset`` falls inside comes without its first part. A frame cut short at the end
    (the reader died writing it) ends the file."""
    size = path.stat().st_size
    with open(path, "rb") as spool:
        position = 0
        while position + FRAME.size <= size:
            spool.seek(position)
            stamp, length = FRAME.unpack(spool.read(FRAME.size))
            start = position + FRAME.size
            end = start + length
            if end > size:
                return
            if end > from_offset:
                yield max(start, from_offset), stamp, end - max(start, from_offset)
            position = end


class RecordCutter:
    """Cuts a byte stream into blocks of whole records, keeping the unfinished tail."""

    def __init__(self, mode: Mode, *, after_cr: bool = False) -> None:
        self.mode = mode
        self._pending: list[bytes] = []
        self.pending_bytes = 0
        self._skip_newline = after_cr

    @property
    def after_cr(self) -> bool:
        """The last block ended with a "\\r" whose "\\n" may come next (and is then no record break)."""
        return self._skip_newline

    def feed(self, data: bytes) -> bytes:
        if self._skip_newline and data:
            self._skip_newline = False
            if data[:1] == b"\n":  # the second half of a "\r\n" split across two reads
                data = data[1:]
        cut = last_break_end(data, self.mode)
        if cut == 0:
            self._pending.append(data)
            self.pending_bytes += len(data)
            if self.pending_bytes < MAX_RECORD_BYTES:
                return b""
            return self.finish()
        block = b"".join([*self._pending, data[:cut]])
        rest = data[cut:]
        self._pending = [rest] if rest else []
        self.pending_bytes = len(rest)
        if self.mode.splits_on_cr and not rest and block[-1:] == b"\r":
            self._skip_newline = True  # the read ended on "\r": a "\n" may follow in the next one
        return block

    def finish(self) -> bytes:
        block = b"".join(self._pending)
        self._pending, self.pending_bytes = [], 0
        return block

    def restart(self, *, after_cr: bool = False) -> None:
        """Start again at the beginning of a record, what is pending dropped (as a new cutter would);
        ``after_cr``: just after a "\\r", so a "\\n" that comes first is no record break."""
        self._pending, self.pending_bytes = [], 0
        self._skip_newline = after_cr


class ChunkSource(Protocol):
    """Where the ingestor takes a pipe's chunks from: a :class:`PipeReader`, or a spool left behind."""

    spool_path: Path
    chunks: deque[Chunk]
    eof: threading.Event


@dataclass
class Pipe:
    reader: ChunkSource
    cutter: RecordCutter
    is_stderr: bool
    spool: BinaryIO | None = None
    bytes_read: int = 0
    bytes_stored: int = 0
    spooled_to: int = 0  # the spool offset past the last spooled chunk taken

    @property
    def name(self) -> str:
        return pipe_name(self.is_stderr)

    def consumed(self) -> tuple[int, bool]:
        """How far the spool is consumed into whole records: where recovery starts, and whether it
        starts just after a "\\r"."""
        return max(0, self.spooled_to - self.cutter.pending_bytes), self.cutter.after_cr


@dataclass
class HostStream:
    host: str
    stream_id: int
    pipes: list[Pipe]
    next_seq: int = 0
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_RECORDS))


class Echo:
    """Shows the job's output on the terminal (host-prefixed when several) and, optionally, each
    point right after the line it came from (never in the middle of a progress bar). A terminal
    that went away (a closed ssh session) ends the echo, not the capture."""

    def __init__(self, *, prefix_hosts: bool, live_metrics: bool) -> None:
        self.prefix_hosts = prefix_hosts
        self.live_metrics = live_metrics
        self.color = sys.stdout.isatty()
        self.closed = False
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
        if self.closed:
            return
        target = sys.stderr if is_stderr else sys.stdout
        try:
            target.flush()
            target.buffer.write(data)
            target.flush()
        except (OSError, ValueError):
            self.closed = True  # a closed terminal must not stop the capture

    def point(self, name: str, value: float, host: str, seq: int) -> None:
        if not self.live_metrics or self.closed:
            return
        text = f"  » {name} = {value:g}   ({host}, record {seq + 1})"
        self._pending_points.append(f"\x1b[2m{text}\x1b[0m" if self.color else text)

    def flush_points(self) -> None:
        if self._pending_points and (self._at_line_start or self.prefix_hosts):
            self._write(False, ("\n".join(self._pending_points) + "\n").encode())
            self._pending_points.clear()


class Ingestor(threading.Thread):
    """Turns the readers' chunks into stored records and points, in batches; outlasts any store outage."""

    def __init__(
        self,
        store: Store,
        job_id: int,
        streams: list[HostStream],
        extractor: Extractor,
        wake: threading.Event,
        echo: Echo | None = None,
        on_error: Callable[[str], None] | None = None,
        *,
        budget: MemoryBudget | None = None,
    ) -> None:
        super().__init__(name="trainmon-ingest", daemon=True)
        self.store = store
        self.job_id = job_id
        self.streams = streams
        self.extractor = extractor
        self.wake = wake
        self.echo = echo
        self.budget = budget  # the readers' in-memory chunks are taken from it (none in a spool left behind)
        self.on_error = on_error or (lambda message: print(f"trainmon: {message}", file=sys.stderr))
        self._finishing = threading.Event()
        self._pending = Batch(job_id)
        self.store_error: StoreError | None = None  # set while the store refuses writes
        self.failure: BaseException | None = None
        self.loss = Loss()  # what the ingestor itself gave up (a disk that stayed full after the job)
        self._names = [d.name for d in extractor.definitions]
        self._backoff = Backoff()

    def finish(self) -> None:
        """Drain what is left (once every reader ended) and wait for it: as long as the store takes to
        come back, but a disk that stays full after the job is given up on (and counted)."""
        self._finishing.set()
        self.wake.set()
        self.join()

    def finish_in_this_thread(self) -> None:
        """:meth:`finish`, without a thread of its own: every source has ended already."""
        self._finishing.set()
        self.wake.set()
        self.run()

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # reported by the supervisor; the readers keep draining
            self.failure = exc
            self.on_error(f"log ingestion stopped: {exc}")

    def _loop(self) -> None:
        final_tries = 0
        while True:
            self.wake.wait(0.25)
            self.wake.clear()
            if self._pending and not self._flush():
                if self._finishing.is_set() and isinstance(self.store_error, StoreFull):
                    final_tries += 1  # the job has ended and the disk stays full
                    if final_tries >= FULL_DISK_TRIES:
                        self._give_up()
                        return
                time.sleep(self._backoff.next_delay())
                continue  # the backlog waits in the spool until this batch is stored
            done = self._finishing.is_set() and all(p.reader.eof.is_set() for s in self.streams for p in s.pipes)
            self._step(final=done)
            if done and not self._pending:
                return

    def _give_up(self) -> None:
        """The job has ended and the store stays full: count what is left as lost, and stop."""
        batch = self._pending
        reason = self.store_error.message if self.store_error else "the store refused the writes"
        self.loss.add(Loss(sum(c[2] for c in batch.chunks), batch.point_count, batch.text_bytes, reason))
        self._pending = Batch(self.job_id)
        for _, _, _, pipe, chunk in self._take_work():
            self.loss.add(count_block(self.extractor, self._records(pipe, chunk)[0]))
            self.loss.bytes += chunk.length
            if chunk.cut:
                pipe.cutter.restart(after_cr=chunk.after_cr)
        for stream in self.streams:
            for pipe in stream.pipes:
                self.loss.add(count_block(self.extractor, pipe.cutter.finish()))
        self.on_error(f"{reason}. Gave up storing the rest of the job's output; how much is recorded on the job.")

    def _take_work(self) -> list[tuple[int, int, HostStream, Pipe, Chunk]]:
        """Every chunk the readers have noted, in read-time order."""
        work: list[tuple[int, int, HostStream, Pipe, Chunk]] = []
        order = 0
        for stream in self.streams:
            for pipe in stream.pipes:
                while pipe.reader.chunks:
                    chunk = pipe.reader.chunks.popleft()
                    work.append((chunk.timestamp_ms, order, stream, pipe, chunk))
                    order += 1
        work.sort(key=lambda item: (item[0], item[1]))
        return work

    def _records(self, pipe: Pipe, chunk: Chunk) -> tuple[bytes, bytes]:
        """A chunk through its pipe's cutter: the whole records it completes, and the bytes it brought
        (none for a cut: output was dropped there, so the record in progress ends)."""
        if chunk.cut:
            return pipe.cutter.finish(), b""
        data = self._chunk_bytes(pipe, chunk)
        pipe.bytes_read += len(data)
        return pipe.cutter.feed(data), data

    def _chunk_bytes(self, pipe: Pipe, chunk: Chunk) -> bytes:
        if chunk.data is not None:
            if self.budget is not None:
                self.budget.give_back(chunk.length)
            return chunk.data
        pipe.spooled_to = chunk.start + chunk.length
        return self._read_spool(pipe, chunk)

    def _step(self, *, final: bool) -> None:
        work = self._take_work()
        for index, (stamp, _, stream, pipe, chunk) in enumerate(work):
            block, data = self._records(pipe, chunk)
            ingested = self._ingest(stream, pipe, block, stamp, data)
            if chunk.cut:  # the output after the drop starts a record (once the one in progress is stored)
                pipe.cutter.restart(after_cr=chunk.after_cr)
            if not ingested:
                self._put_back(work[index + 1:])  # the store refuses: the rest waits where it was
                return
        if final:
            stamp = now_ms()
            for stream in self.streams:
                for pipe in stream.pipes:
                    block = pipe.cutter.finish()
                    if block:
                        self._ingest(stream, pipe, block, stamp, b"")
        if work or final:
            self._pending.diagnostics = [s.to_json() for s in self.extractor.stats]
            self._note_progress()
        if self._pending:
            self._flush()

    @staticmethod
    def _put_back(work: list[tuple[int, int, HostStream, Pipe, Chunk]]) -> None:
        for _, _, _, pipe, chunk in reversed(work):
            pipe.reader.chunks.appendleft(chunk)

    def _note_progress(self) -> None:
        for stream in self.streams:
            for pipe in stream.pipes:
                self._pending.spools[(stream.stream_id, pipe.name)] = pipe.consumed()

    def _read_spool(self, pipe: Pipe, chunk: Chunk) -> bytes:
        if pipe.spool is None:
            pipe.spool = open(pipe.reader.spool_path, "rb")  # noqa: SIM115 - closed in close()
        pipe.spool.seek(chunk.start)
        return pipe.spool.read(chunk.length)

    def _ingest(self, stream: HostStream, pipe: Pipe, block: bytes, stamp: int, raw: bytes) -> bool:
        """Add a block of records to the pending batch (writing it when full); False when that write
        failed."""
        if not block:
            if self.echo and raw and not self.echo.prefix_hosts:
                self.echo.passthrough(pipe.is_stderr, raw)
            return True
        extractor = self.extractor
        hits = extractor.scan_columns(block)
        count = extractor.count_records(block)  # after the scan, which has counted them already
        text = stored_text(block, extractor.mode)
        first = stream.next_seq
        batch = self._pending
        batch.chunks.append((stream.stream_id, first, count, stamp, text))
        batch.text_bytes += len(block)
        host = stream.host
        if len(hits.records):
            seqs = hits.records + first
            batch.add_points(PointBlock(self._names, stamp, host, stream.stream_id, seqs, hits.definitions, hits.values))
            if self.echo and self.echo.live_metrics:
                for seq, definition, value in zip(seqs.tolist(), hits.definitions.tolist(), hits.values.tolist(),
                                                  strict=True):
                    self.echo.point(self._names[definition], value, host, seq)
        if self.echo:
            if self.echo.prefix_hosts:
                self.echo.records(host, pipe.is_stderr, decode(bytes(text)).split("\n"))
            elif raw:
                self.echo.passthrough(pipe.is_stderr, raw)
            else:
                self.echo.flush_points()
        stream.next_seq += count
        previous = batch.stream_stats.get(stream.stream_id, (0, 0, stamp))
        batch.stream_stats[stream.stream_id] = (previous[0] + count, previous[1] + self._unstored_bytes(pipe),
                                                stamp)
        if pipe.is_stderr:
            tail = bytes(text[-STDERR_TAIL_BYTES:]).rsplit(b"\n", STDERR_TAIL_RECORDS)[-STDERR_TAIL_RECORDS:]
            stream.stderr_tail.extend(decode(line) for line in tail)
        if batch.text_bytes >= FLUSH_BYTES or batch.point_count >= FLUSH_POINTS:
            self._note_progress()
            return self._flush()
        return True

    @staticmethod
    def _unstored_bytes(pipe: Pipe) -> int:
        """Bytes read from the pipe since the last stored block (what was read, "\r\n" split or not)."""
        counted = pipe.bytes_read - pipe.bytes_stored
        pipe.bytes_stored = pipe.bytes_read
        return counted

    def _flush(self) -> bool:
        """Write the pending batch; False (the batch kept) while the store refuses it."""
        if not self._pending:
            return True
        try:
            self.store.write_batch(self._pending)
        except StoreError as exc:
            if self.store_error is None:
                self.on_error(f"{exc.message}. Keeping the job's output in its spool and retrying.")
            self.store_error = exc
            return False
        if self.store_error is not None:
            self.on_error("the store accepts writes again; nothing was lost.")
        self.store_error = None
        self._backoff.reset()
        self._pending = Batch(self.job_id)
        return True

    def close(self) -> None:
        """Close the spool files; the supervisor removes them once the job's end is stored."""
        for stream in self.streams:
            for pipe in stream.pipes:
                if pipe.spool is not None:
                    pipe.spool.close()
                    pipe.spool = None
