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
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np

from ..errors import StoreError, StoreFull
from ..jobs.document import UnstoredOutput
from ..parsing.definitions import MetricDefinition
from ..parsing.extract import Extractor, Hits
from ..parsing.framing import Mode, decode, last_break_end
from ..store import Batch, PointBlock, Store
from . import launcher, spooler
from .retry import FULL_DISK_TRIES, Backoff, Patience

READ_BYTES = 1 << 20
MAX_RECORD_BYTES = 16 << 20
STDERR_TAIL_RECORDS = 20
STDERR_TAIL_BYTES = 64 << 10  # of a block, what the stderr tail is taken from
NOTE_SLACK_MS = 1000  # a read is noted to the ingestor within this (milliseconds, mostly): see Ingestor._step
FLUSH_BYTES = 8 << 20
FLUSH_POINTS = 50_000
MEMORY_CAP_BYTES = 64 << 20  # output held in memory when the spool cannot be written, for the whole job
OPEN_RECORD_BYTES = 64 << 10  # of a record a drop starts in: what is matched with its dropped rest
POLL_MS = 200
SPOOL_RETRY_MS = spooler.RETRY_MS  # a spool that could not be written is tried again this often
FRAME = spooler.FRAME  # a spool frame's header: read time (ms), length; the bytes follow
NOTE = spooler.NOTE
NOTES_READ_BYTES = 1 << 20
NOTES_NAP_S = 0.01  # after a read of a few notes, the next ones gather this long (a wake-up for many, not each)
NOTES_FEW_BYTES = 64 * NOTE.size
STOP_WAIT_S = 5.0  # for the spooler process to end once told to
SCAN_BYTES = 8 << 20  # consecutive reads of a pipe are matched together, up to this much
SMALL_READS_BYTES = 64 << 10  # reads this small on average are read from the spool together
NICER = 10  # how much less the threads that store the output (and judge it) are scheduled than the job
RELEASE_BYTES = 4 << 20  # a spool's stored blocks are freed this much at a time
LEAVE_WAIT_S = 15.0  # for a write in progress when the supervisor stops waiting for the store
BATCH_WAIT_S = 0.05  # a batch of a few reads waits this long for more before it is stored (one transaction)


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


class PipeOutput:
    """One pipe of the job as the ingestor takes it (a :class:`ChunkSource`): the reads spooled,
    or, when the spool could not take them, held in memory (up to the job's ``budget``) and past
    that dropped and counted (``losses``). Fed by the spooler process's notes (:class:`Spooler`)
    or by a reading thread (:class:`PipeReader`)."""

    def __init__(self, spool_path: Path, wake: threading.Event, *, budget: MemoryBudget,
                 losses: LossCounter) -> None:
        self.spool_path = spool_path
        self.wake = wake
        self.budget = budget
        self.losses = losses
        self.chunks: deque[Chunk] = deque()
        self.eof = threading.Event()
        self.spool_error: str | None = None  # why the spool could not be written, while it cannot
        self._dropping = False
        self._last: Chunk | None = None  # the last read kept

    def spooled(self, start: int, length: int, stamp: int) -> None:
        """A read the spool holds: ``length`` bytes at ``start``, read at ``stamp``."""
        self.spool_error = None
        self._kept(Chunk(start, length, stamp, None))

    def unspooled(self, data: bytes, stamp: int, offset: int) -> None:
        """A read the spool could not take (``offset``: where the spool is): held in memory, or
        dropped and counted."""
        if self.budget.take(len(data)):
            self._kept(Chunk(offset, len(data), stamp, data))
            return
        if not self._dropping:
            self._dropping = True
            last = self._bytes(self._last, at_end=True)
            cut = last_break_end(last, self.losses.cutter.mode)
            self.losses.begin(last[-1:] or b"\n", last[cut:], f"the job's spool could not be written "
                              f"({self.spool_error}) and the {self.budget.cap_bytes >> 20} MiB of output trainmon holds "
                              "in memory meanwhile were full")
            self.chunks.append(Chunk(offset, 0, stamp, b"", cut=True))
        self.losses.drop(data)

    def ended(self) -> None:
        """The pipe ended (or was given up): every read is noted."""
        self.losses.finish()
        self.eof.set()
        self.wake.set()

    def _kept(self, chunk: Chunk) -> None:
        if self._dropping:
            self._dropping = False
            after_cr = self.losses.end(self._bytes(chunk, at_end=False))
            self.chunks.append(Chunk(chunk.start, 0, chunk.timestamp_ms, b"", cut=True, after_cr=after_cr))
        self.chunks.append(chunk)
        self._last = chunk
        self.wake.set()

    def _bytes(self, chunk: Chunk | None, *, at_end: bool) -> bytes:
        """Up to OPEN_RECORD_BYTES of a kept read, from its end or its start (read back from the spool:
        what a drop's counting needs of the output on either side of it)."""
        if chunk is None:
            return b""
        if chunk.data is not None:
            return chunk.data[-OPEN_RECORD_BYTES:] if at_end else chunk.data[:OPEN_RECORD_BYTES]
        size = min(chunk.length, OPEN_RECORD_BYTES)
        try:
            with open(self.spool_path, "rb") as spool:
                spool.seek(chunk.start + chunk.length - size if at_end else chunk.start)
                return spool.read(size)
        except OSError:
            return b""


class PipeReader(threading.Thread):
    """Drains one pipe into its spool file from a thread of this process, from ``offset`` on (what
    the spool holds before it stays); ``preamble`` (whole lines trainmon has to say about the job,
    in its log) comes first, as if the job had written it. What reads the pipes when the spooler
    process cannot (:class:`Spooler`)."""

    def __init__(self, fd: int, output: PipeOutput, *, preamble: bytes = b"", offset: int = 0) -> None:
        super().__init__(name=f"trainmon-read-{output.spool_path.name}", daemon=True)
        self.fd = fd
        self.output = output
        self.preamble = preamble
        self.offset = offset
        self._abandon = threading.Event()
        self._spool_fd = -1
        self._spool_retry_ms = 0

    def abandon(self) -> None:
        """Stop reading (what is still in the pipe is not read): for a pipe whose writers will not
        close it, once the job is over."""
        self._abandon.set()

    def run(self) -> None:
        os.set_blocking(self.fd, False)
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLHUP)
        try:
            self._spool_fd = self._open_spool()
        except OSError as exc:
            self.output.spool_error = str(exc)  # tried again with the first read
        if self.preamble:
            self._keep(self.preamble)
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
                self._keep(data)
        finally:
            if self._spool_fd >= 0:
                os.close(self._spool_fd)
            self.output.ended()

    def _open_spool(self) -> int:
        fd = os.open(self.output.spool_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        _truncate(fd, self.offset)  # a frame cut short goes
        return fd

    def _keep(self, data: bytes) -> None:
        """Spool one read (or hand it over as not spooled)."""
        stamp = now_ms()
        output = self.output
        if output.spool_error is None or stamp >= self._spool_retry_ms:
            try:
                if self._spool_fd < 0:  # it could not be opened
                    self._spool_fd = self._open_spool()
                _write_all(self._spool_fd, FRAME.pack(stamp, len(data)), data)
            except OSError as exc:
                output.spool_error = str(exc)
                self._spool_retry_ms = stamp + SPOOL_RETRY_MS
                if self._spool_fd >= 0:  # no frame cut short: the next one follows the last whole one
                    _truncate(self._spool_fd, self.offset)
            else:
                output.spooled(self.offset + FRAME.size, len(data), stamp)
                self.offset += FRAME.size + len(data)
                return
        output.unspooled(data, stamp, self.offset + FRAME.size)


class Spooler:
    """The pipes of a job's hosts read by the spooler process (:mod:`trainmon.runtime.spooler`), each
    pipe's reads noted into its :class:`PipeOutput` by a thread of this process. The pipes' read ends
    stay open here too, unread: if the process dies, :class:`PipeReader` threads go on from where the
    spool files end, and the job never sees its pipes close."""

    def __init__(self, pipes: list[tuple[int, PipeOutput, int]], tag: str = "") -> None:
        self.pipes = pipes  # (read end, output, the spool offset after what is there already)
        self.tag = tag  # the job's: the process carries it as launcher.SPOOLER_VARIABLE, for whoever reaps the job
        self.readers: list[PipeReader] = []  # if the process died
        self.process: subprocess.Popen[bytes] | None = None
        self._control = -1
        self._abandoned = False
        self._thread = threading.Thread(target=self._take_notes, name="trainmon-spool-notes", daemon=True)
        self._next = [offset for _, _, offset in pipes]  # per pipe: where its next frame goes
        self._notes = -1

    def start(self) -> None:
        notes, their_notes = os.pipe()
        their_control, control = os.pipe()
        launcher._widen_pipe(notes)
        arguments = [f"{fd}:{offset}:{output.spool_path}" for fd, output, offset in self.pipes]
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", spooler.__file__, str(their_notes), str(their_control), *arguments],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                pass_fds=[their_notes, their_control, *(fd for fd, _, _ in self.pipes)],
                env={**os.environ, launcher.SPOOLER_VARIABLE: self.tag})
        except OSError:
            self.process = None
            os.close(notes)
            os.close(control)
        else:
            launcher.add_helper(self.process.pid)
            self._notes, self._control = notes, control
        finally:
            os.close(their_notes)
            os.close(their_control)
        if self.process is None:
            self._read_here(range(len(self.pipes)))  # no process: this one reads its pipes
        else:
            self._thread.start()

    def join(self, timeout_s: float) -> None:
        """Wait at most ``timeout_s`` for every pipe to end; then give up on those still open."""
        deadline = time.monotonic() + timeout_s
        for _, output, _ in self.pipes:
            output.eof.wait(max(0.0, deadline - time.monotonic()))
        self._abandoned = True
        if self._control >= 0:
            try:
                os.write(self._control, b"abandon\n")
            except OSError:
                pass
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT_S)
            if self._thread.is_alive() and self.process is not None:  # a spooler that does not answer
                self.process.kill()
                self._thread.join()
        for reader in self.readers:
            reader.join(max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                reader.abandon()
                reader.join()
        for fd, output, _ in self.pipes:
            _close(fd)
            if not output.eof.is_set():  # never read (the spooler was not started)
                output.ended()
        _close(self._control)

    def _take_notes(self) -> None:
        """The spooler's notes, as they come, into each pipe's output; at their end, what the
        spooler did not finish goes on here."""
        pending = b""
        while True:
            try:
                data = os.read(self._notes, NOTES_READ_BYTES)
            except OSError:
                data = b""
            if not data:
                break
            pending = self._noted(pending + data)
            if len(data) < NOTES_FEW_BYTES:  # a job printing a line at a time: a note a line
                time.sleep(NOTES_NAP_S)
        os.close(self._notes)
        assert self.process is not None
        self.process.wait()
        launcher.remove_helper(self.process.pid)
        open_pipes = [index for index, (_, output, _) in enumerate(self.pipes) if not output.eof.is_set()]
        if self._abandoned:
            for index in open_pipes:
                self.pipes[index][1].ended()
        elif open_pipes:
            print(f"trainmon: warning: the spooler process ended ({_how(self.process.returncode)}); reading the "
                  "job's pipes here from now on", file=sys.stderr)
            self._read_here(open_pipes)

    def _noted(self, data: bytes) -> bytes:
        """Notes into outputs; what is left of ``data`` (a note, or a note's bytes, not whole yet)."""
        at = 0
        while len(data) - at >= NOTE.size:
            index, kind, length, stamp, offset = NOTE.unpack_from(data, at)
            body = NOTE.size if kind in (spooler.SPOOLED, spooler.ENDED) else NOTE.size + length
            if len(data) - at < body:
                break
            output = self.pipes[index][1]
            if kind == spooler.SPOOLED:
                output.spooled(offset + FRAME.size, length, stamp)
                self._next[index] = offset + FRAME.size + length
            elif kind == spooler.HELD:
                output.unspooled(data[at + NOTE.size:at + body], stamp, offset + FRAME.size)
            elif kind == spooler.TROUBLE:
                output.spool_error = data[at + NOTE.size:at + body].decode("utf-8", "replace")
            else:
                output.ended()
            at += body
        return data[at:]

    def _read_here(self, indexes: Iterable[int]) -> None:
        """Threads of this process read these pipes from where their spool files hold whole frames."""
        for index in indexes:
            fd, output, _ = self.pipes[index]
            offset = self._next[index]
            try:
                for start, stamp, length in spool_frames(output.spool_path, offset + FRAME.size):
                    _frame(output.spool_path, start - FRAME.size, stamp, length)  # its header, if it was begun
                    output.spooled(start, length, stamp)  # framed but not noted when the process died
                    offset = start + length
            except OSError:
                pass  # no spool file (it could not be made): the reader tries it again
            reader = PipeReader(fd, output, offset=offset)
            self.readers.append(reader)
            reader.start()


def start_spool(output: PipeOutput, preamble: bytes) -> int:
    """A pipe's spool file made anew, holding ``preamble`` (trainmon's own lines, as the job's first
    output) when there is one; where its next frame goes."""
    stamp = now_ms()
    try:
        fd = os.open(output.spool_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if preamble:
                _write_all(fd, FRAME.pack(stamp, len(preamble)), preamble)
        finally:
            os.close(fd)
    except OSError as exc:
        output.spool_error = str(exc)
        if preamble:
            output.unspooled(preamble, stamp, FRAME.size)
        return 0
    if preamble:
        output.spooled(FRAME.size, len(preamble), stamp)
    return FRAME.size + len(preamble) if preamble else 0


def release_spool(path: Path, frame: int) -> None:
    """Free a spool file's blocks before the frame at ``frame``, whose records are stored (no one
    reads them again): a header at the start says where the frames go on (a negative read time),
    and the bytes between are punched out, the file's size unchanged. A file system that cannot
    punch keeps them (as every spool did before)."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return
    try:
        os.pwrite(fd, FRAME.pack(-frame, 0), 0)
        if frame > FRAME.size:
            spooler.punch(fd, FRAME.size, frame - FRAME.size)
    except OSError:
        pass
    finally:
        os.close(fd)


def _frame(path: Path, at: int, stamp: int, length: int) -> None:
    """The header of the frame at ``at``, written where it is still zeros (a frame the spooler began)."""
    with open(path, "r+b") as spool:
        spool.seek(at)
        if spool.read(FRAME.size) == FRAME.pack(0, 0):
            spool.seek(at)
            spool.write(FRAME.pack(stamp, length))


def _how(code: int | None) -> str:
    return f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"


def _close(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def _run_end(work: list[tuple[int, int, HostStream, Pipe, Chunk]], start: int) -> int:
    """Where the run of work items from ``start`` ends: reads of one pipe, one after another in the
    work's order (another pipe's read between them ends it, as does a drop), up to SCAN_BYTES."""
    pipe = work[start][3]
    end, size = start + 1, work[start][4].length
    if work[start][4].cut:
        return end
    while end < len(work) and work[end][3] is pipe and not work[end][4].cut and size < SCAN_BYTES:
        size += work[end][4].length
        end += 1
    return end


def _split_hits(hits: Hits, counts: list[int]) -> list[tuple[Hits, int]]:
    """The points of blocks matched together, block by block (``counts``: each block's records),
    their records counted from each block's first."""
    if len(counts) == 1:
        return [(hits, counts[0])]
    firsts = np.cumsum([0, *counts])
    cuts = np.searchsorted(hits.records, firsts)
    return [(Hits(*(column[cuts[k]:cuts[k + 1]] for column in hits))._replace(
        records=hits.records[cuts[k]:cuts[k + 1]] - firsts[k]), counts[k]) for k in range(len(counts))]


def yield_to_the_job() -> None:
    """The calling thread gives way to the job's processes when the machine is busy (a nicer
    scheduling priority, Linux's per-thread nice): what it does can wait in the spool, the job's
    writes should not."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + NICER)
    except (AttributeError, OSError):
        pass


def stored_text(block: bytes, mode: Mode, crlf: bool | None = None) -> bytes | memoryview:
    """A block of whole records as a log chunk holds them: joined by "\\n" (a "\\r" or "\\r\\n" break is
    one too in the modes that split there), without the last record's break (a view: no copy).
    ``crlf=False``: the block is known to hold no "\\r\\n" (a search for it costs what the rest does)."""
    if mode.splits_on_cr and b"\r" in block:
        if crlf is not False:
            block = block.replace(b"\r\n", b"\n")
        block = block.replace(b"\r", b"\n")
    return memoryview(block)[:-1] if block.endswith(b"\n") else block


def _joined(parts: list[bytes]) -> bytes:
    return parts[0] if len(parts) == 1 else b"".join(parts)


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
    (the reader died writing it) ends the file; so does one whose header is still zeros (the
    spooler writes it once the read's bytes are in: it died in between), but for those bytes,
    read at the file's last change."""
    status = path.stat()
    size = status.st_size
    with open(path, "rb") as spool:
        position = 0
        while position + FRAME.size <= size:
            spool.seek(position)
            stamp, length = FRAME.unpack(spool.read(FRAME.size))
            if stamp < 0 and -stamp > position:  # the frames before were released (release_spool): on from there
                position = -stamp
                continue
            start = position + FRAME.size
            if length == 0:  # a frame begun: what follows it is its read
                if size > max(start, from_offset):
                    yield max(start, from_offset), int(status.st_mtime * 1000), size - max(start, from_offset)
                return
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
        if not self._pending and cut == len(data):
            block, rest = data, b""
        else:  # one copy: the records' bytes are joined from a view of the read
            block, rest = b"".join([*self._pending, memoryview(data)[:cut]]), data[cut:]
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
    frames: deque[int] = field(default_factory=deque)  # where the spooled chunks taken begin their frames
    released: int = 0  # the spool's blocks before this offset are freed (their records are stored)

    @property
    def name(self) -> str:
        return pipe_name(self.is_stderr)

    def release_through(self, stored: int) -> None:
        """The spool's records are stored up to offset ``stored``: free its blocks before the frame
        that holds it, once that frees RELEASE_BYTES."""
        frames = self.frames
        while len(frames) > 1 and frames[1] <= stored:
            frames.popleft()
        if frames and frames[0] - self.released >= RELEASE_BYTES:
            self.released = frames[0]
            release_spool(self.reader.spool_path, frames[0])

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


class BatchWriter(threading.Thread):
    """Writes the ingestor's batches to the store in order, on a thread of its own, so that packing
    and storing one batch (zstd and the database let go of Python's lock) overlaps cutting and
    matching the next. A batch the store refuses (a server down, a lock, a full disk) is written
    again with backoff until it is stored; once the job has ended, a disk that stays full is given
    up on after FULL_DISK_TRIES, and what it refused is counted as lost."""

    def __init__(self, store: Store, on_error: Callable[[str], None]) -> None:
        super().__init__(name="trainmon-store-writer", daemon=True)
        self.store = store
        self.on_error = on_error
        self.store_error: StoreError | None = None  # set while the store refuses writes
        self.loss = Loss()  # the batches given up
        self.gave_up = False
        self.failure: BaseException | None = None  # what ended the thread, if anything but finish() did
        self._queue: deque[tuple[Batch, int | None]] = deque()  # each batch, and the reads' horizon it completes
        self.stored_through_ms = 0  # every read made before this time (epoch ms) is stored
        self.stored_spools: dict[tuple[int, str], tuple[int, bool]] = {}  # how far each spool's records are stored
        self._changed = threading.Condition()
        self._finishing = False
        self._stopping = False
        self._leaving = False
        self._backoff = Backoff()

    def put(self, batch: Batch, horizon_ms: int | None = None) -> None:
        """A batch to store; ``horizon_ms``: once it is stored, every read made before that time is."""
        with self._changed:
            if self.gave_up:
                self.loss.add(_batch_loss(batch, self._reason()))
                return
            self._queue.append((batch, horizon_ms))
            self._changed.notify_all()

    def stored_through(self, horizon_ms: int) -> None:
        """Every read made before ``horizon_ms`` is stored once the batches queued are: at once when none is."""
        with self._changed:
            if self._queue:
                batch, known = self._queue[-1]
                self._queue[-1] = batch, horizon_ms if known is None else max(known, horizon_ms)
            else:
                self.stored_through_ms = max(self.stored_through_ms, horizon_ms)

    def waiting(self) -> int:
        """Batches not stored yet (the one being written among them)."""
        with self._changed:
            return len(self._queue)

    def wait_until_at_most(self, batches: int, timeout_s: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: len(self._queue) <= batches or self.gave_up or self.failure is not None,
                                   timeout_s)

    def finishing(self) -> None:
        """The job has ended: a disk that stays full is given up on from now on."""
        with self._changed:
            self._finishing = True
            self._changed.notify_all()

    def finish(self) -> None:
        """Every batch put is stored (or given up); the thread ends."""
        with self._changed:
            self._finishing = self._stopping = True
            self._changed.notify_all()
        if self.is_alive():
            self.join()

    def leave(self) -> None:
        """Store nothing more: the batches not stored stay in the spool (which recorded how far each
        stored batch took it), for whoever reaps the job; the thread ends after its write in progress."""
        with self._changed:
            self._leaving = self._stopping = True
            self._changed.notify_all()

    def run(self) -> None:
        yield_to_the_job()
        try:
            self._write()
        except BaseException as exc:  # the ingestor raises it (and the supervisor reports it)
            self.failure = exc
            with self._changed:
                self._changed.notify_all()

    def _write(self) -> None:
        full_tries = 0
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue or self._stopping)
                if not self._queue or self._leaving:
                    return
                batch = self._queue[0][0]
            try:
                self.store.write_batch(batch)
            except StoreError as exc:
                if self.store_error is None:
                    self.on_error(f"{exc.message}. Keeping the job's output in its spool and retrying.")
                self.store_error = exc
                if self._finishing and isinstance(exc, StoreFull):
                    full_tries += 1  # the job has ended and the disk stays full
                    if full_tries >= FULL_DISK_TRIES:
                        self._give_up()
                        continue
                with self._changed:
                    self._changed.wait(self._backoff.next_delay())
                continue
            if self.store_error is not None:
                self.on_error("the store accepts writes again; nothing was lost.")
            self.store_error = None
            self._backoff.reset()
            with self._changed:
                _, horizon_ms = self._queue.popleft()  # (the horizon may have moved meanwhile)
                self.stored_spools = {**self.stored_spools, **batch.spools}
                if horizon_ms is not None:
                    self.stored_through_ms = max(self.stored_through_ms, horizon_ms)
                self._changed.notify_all()

    def _give_up(self) -> None:
        with self._changed:
            self.gave_up = True
            for batch, _ in self._queue:
                self.loss.add(_batch_loss(batch, self._reason()))
            self._queue.clear()
            self._changed.notify_all()

    def _reason(self) -> str:
        return self.store_error.message if self.store_error else "the store refused the writes"


def _batch_loss(batch: Batch, reason: str) -> Loss:
    return Loss(sum(chunk[2] for chunk in batch.chunks), batch.point_count, batch.text_bytes, reason)


class Ingestor(threading.Thread):
    """Turns the readers' chunks into stored records and points, in batches (written by a
    :class:`BatchWriter`, one batch behind); outlasts any store outage."""

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
        release_spools: bool = True,
    ) -> None:
        super().__init__(name="trainmon-ingest", daemon=True)
        self.store = store
        self.job_id = job_id
        self.streams = streams
        self.extractor = extractor
        self.wake = wake
        self.echo = echo
        self.budget = budget  # the readers' in-memory chunks are taken from it (none in a spool left behind)
        self.release_spools = release_spools  # free the spools' blocks as their records are stored
        self.on_error = on_error or (lambda message: print(f"trainmon: {message}", file=sys.stderr))
        self._finishing = threading.Event()
        self._pending = Batch(job_id)
        self._pending_since: float | None = None  # when the pending batch took its first block (monotonic)
        self.writer = BatchWriter(store, self.on_error)
        self.failure: BaseException | None = None
        self.loss = Loss()  # what was given up (a disk that stayed full after the job)
        self.left = False  # what was not stored was left in the spool: the store was waited for long enough
        self._names = [d.name for d in extractor.definitions]

    @property
    def store_error(self) -> StoreError | None:
        """Why the store refuses writes, while it does."""
        return self.writer.store_error

    def finish(self, patience: Patience | None = None) -> None:
        """Drain what is left (once every reader ended) and wait for it: as long as ``patience``
        lasts (as long as the store takes to come back, without it), but a disk that stays full
        after the job is given up on (and counted). Once patience is lost, what is not stored is
        left in the spool (:attr:`left`)."""
        self._finishing.set()
        self.wake.set()
        while self.is_alive():
            self.join(0.25)
            if patience is not None and self.is_alive() and patience.lost(self.store_error):
                self.left = True
                self.writer.leave()
                self.wake.set()
                self.join(LEAVE_WAIT_S)  # (a write in progress on a store gone: its connection's timeout)
                return

    @property
    def stored_through_ms(self) -> int:
        """Every read of the job's output made before this time (epoch ms) is stored: what rules that
        join the output with other data (the profile) may judge up to."""
        return self.writer.stored_through_ms

    def waiting_bytes(self) -> int:
        """The output in the spools that is not taken yet (about: read from another thread)."""
        waiting = 0
        for stream in self.streams:
            for pipe in stream.pipes:
                try:
                    waiting += max(0, os.stat(pipe.reader.spool_path).st_size - pipe.spooled_to)
                except OSError:  # no spool (yet, or the disk refused it: the output is in memory)
                    pass
        return waiting

    def finish_in_this_thread(self) -> None:
        """:meth:`finish`, without a thread of its own: every source has ended already."""
        self._finishing.set()
        self.wake.set()
        self.run()

    def run(self) -> None:
        yield_to_the_job()
        self.writer.start()
        try:
            self._loop()
        except BaseException as exc:  # reported by the supervisor; the readers keep draining
            self.failure = exc
            self.on_error(f"log ingestion stopped: {exc}")
        finally:
            self.writer.finish()
            self.loss.add(self.writer.loss)

    def _loop(self) -> None:
        pipes = [pipe for stream in self.streams for pipe in stream.pipes]
        while True:
            if not any(pipe.reader.chunks for pipe in pipes):  # (work put back while the writer was behind: at once)
                wait_s = self._batch_wait_s()  # a pending batch goes when it is due, reads or not
                self.wake.wait(0.25 if wait_s <= 0 else min(0.25, wait_s))
            self.wake.clear()
            if self.left:
                return
            if self._finishing.is_set():
                self.writer.finishing()
            if self.writer.gave_up:
                self._give_up()
                return
            if self.writer.waiting() > 1:  # the writer is a batch behind already (a slow or failing store):
                self.writer.wait_until_at_most(1, 0.25)  # the backlog waits in the spool
                continue
            if self.writer.failure is not None:
                raise self.writer.failure
            if self.release_spools:
                self._release()
            done = self._finishing.is_set() and all(pipe.reader.eof.is_set() for pipe in pipes)
            self._step(final=done)
            if done and not any(pipe.reader.chunks for pipe in pipes):  # (a step the writer held up left some)
                self.writer.finish()
                if self.writer.failure is not None:
                    raise self.writer.failure
                if self.writer.gave_up:
                    self._give_up()
                return

    def _release(self) -> None:
        """Free the spools' blocks whose records are stored, so a spool holds the backlog only."""
        stored = self.writer.stored_spools
        for stream in self.streams:
            for pipe in stream.pipes:
                progress = stored.get((stream.stream_id, pipe.name))
                if progress is not None:
                    pipe.release_through(progress[0])

    def _give_up(self) -> None:
        """The job has ended and the store stays full: count what is left as lost, and stop."""
        reason = self.writer.loss.reason or "the store refused the writes"
        self.loss.add(_batch_loss(self._pending, reason))
        self._pending, self._pending_since = Batch(self.job_id), None
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

    def _records(self, pipe: Pipe, chunk: Chunk, spooled: tuple[int, bytes] | None = None) -> tuple[bytes, bytes]:
        """A chunk through its pipe's cutter: the whole records it completes, and the bytes it brought
        (none for a cut: output was dropped there, so the record in progress ends). ``spooled``: the
        spool's bytes from an offset, read once for the reads of a run (:meth:`_spooled`)."""
        if chunk.cut:
            return pipe.cutter.finish(), b""
        data = self._chunk_bytes(pipe, chunk, spooled)
        pipe.bytes_read += len(data)
        return pipe.cutter.feed(data), data

    def _chunk_bytes(self, pipe: Pipe, chunk: Chunk, spooled: tuple[int, bytes] | None) -> bytes:
        if chunk.data is not None:
            if self.budget is not None:
                self.budget.give_back(chunk.length)
            return chunk.data
        pipe.spooled_to = chunk.start + chunk.length
        pipe.frames.append(chunk.start - FRAME.size)
        if spooled is not None:
            at = chunk.start - spooled[0]
            return spooled[1][at:at + chunk.length]
        return self._read_span(pipe, chunk.start, chunk.length)

    def _step(self, *, final: bool) -> None:
        horizon = now_ms() - NOTE_SLACK_MS  # every read made before this was noted by now: this step takes it
        work = self._take_work()
        index = 0
        while index < len(work):
            end = _run_end(work, index)
            ingested = self._ingest_run(work[index:end])
            index = end
            if not ingested:
                self._put_back(work[index:])  # the writer is behind: the rest waits where it was
                return
        if final:
            stamp = now_ms()
            for stream in self.streams:
                for pipe in stream.pipes:
                    block = pipe.cutter.finish()
                    if block:
                        self._ingest(stream, pipe, [(block, stamp, b"")])
        if work or final:
            self._pending.diagnostics = [s.to_json() for s in self.extractor.stats]
            self._note_progress()
        if self._pending and self._pending_since is None:
            self._pending_since = time.monotonic()
        if not self._pending:
            self.writer.stored_through(horizon)
        elif final or self._batch_wait_s() <= 0:
            self._flush(horizon)

    def _batch_wait_s(self) -> float:
        """How long the pending batch may still wait for more reads: a job printing a line at a time
        costs a transaction every BATCH_WAIT_S, not one a line, and its points are still stored
        within a fraction of a second."""
        if self._pending_since is None:
            return 0.0
        return self._pending_since + BATCH_WAIT_S - time.monotonic()

    def _ingest_run(self, run: list[tuple[int, int, HostStream, Pipe, Chunk]]) -> bool:
        """Consecutive reads of one pipe, each through its cutter, then matched together. Reads of
        the same millisecond are one block while each ends a record: their records have one time,
        and a job printing a line at a time costs a block per millisecond, not one per line."""
        stream, pipe = run[0][2], run[0][3]
        groups: list[tuple[int, list[bytes], list[bytes]]] = []  # (time, its reads' blocks, their bytes)
        spooled = self._spooled(pipe, [chunk for _, _, _, _, chunk in run])
        for stamp, _, _, _, chunk in run:
            block, data = self._records(pipe, chunk, spooled)
            last = groups[-1][1][-1] if groups and groups[-1][0] == stamp else None
            if last is not None and (not last or _ends_record(last[-1:], self.extractor.mode)):
                groups[-1][1].append(block)
                groups[-1][2].append(data)
            else:
                groups.append((stamp, [block], [data]))
            if chunk.cut:  # the output after the drop starts a record (once the one in progress is stored)
                pipe.cutter.restart(after_cr=chunk.after_cr)
        return self._ingest(stream, pipe, [(_joined(blocks), stamp, _joined(data)) for stamp, blocks, data in groups])

    @staticmethod
    def _put_back(work: list[tuple[int, int, HostStream, Pipe, Chunk]]) -> None:
        for _, _, _, pipe, chunk in reversed(work):
            pipe.reader.chunks.appendleft(chunk)

    def _note_progress(self) -> None:
        for stream in self.streams:
            for pipe in stream.pipes:
                self._pending.spools[(stream.stream_id, pipe.name)] = pipe.consumed()

    def _spooled(self, pipe: Pipe, chunks: list[Chunk]) -> tuple[int, bytes] | None:
        """The spool's bytes under a run of small spooled reads, read at once (a read per line costs
        a job that prints a line at a time more than matching them does), and the offset they start
        at; None for large reads, each read on its own (no second copy of a flood)."""
        spooled = [chunk for chunk in chunks if chunk.data is None and not chunk.cut]
        if len(spooled) < 2:
            return None
        start = spooled[0].start
        span = spooled[-1].start + spooled[-1].length - start
        if span > SMALL_READS_BYTES * len(spooled):
            return None
        return start, self._read_span(pipe, start, span)

    def _read_span(self, pipe: Pipe, start: int, length: int) -> bytes:
        if pipe.spool is None:
            pipe.spool = open(pipe.reader.spool_path, "rb")  # noqa: SIM115 - closed in close()
        pipe.spool.seek(start)
        return pipe.spool.read(length)

    def _ingest(self, stream: HostStream, pipe: Pipe, pieces: list[tuple[bytes, int, bytes]]) -> bool:
        """Add blocks of records (each with the time of the read that completed it, and the bytes that
        read brought, for the echo) to the pending batch; False when the writer is behind. Blocks
        that follow one another are matched at once: many small reads cost what one large does."""
        batch = self._pending
        for (block, stamp, raw), (hits, count, crlf) in zip(pieces, self._matched([block for block, _, _ in pieces]),
                                                            strict=True):
            self._add(stream, pipe, block, stamp, raw, hits, count, crlf)
        if batch.text_bytes >= FLUSH_BYTES or batch.point_count >= FLUSH_POINTS:
            self._note_progress()
            return self._flush()
        return True

    def _matched(self, blocks: list[bytes]) -> list[tuple[Hits, int, bool | None]]:
        """Each block's points and records, the blocks matched together (those between which a
        record may not run on: each ends with a break, but a record cut at MAX_RECORD_BYTES)."""
        extractor = self.extractor
        found: list[tuple[Hits, int, bool | None]] = []
        start = 0
        while start < len(blocks):
            end = start + 1
            while end < len(blocks) and (not blocks[end - 1] or _ends_record(blocks[end - 1][-1:], extractor.mode)):
                end += 1
            group = blocks[start:end]
            joined = _joined(group)
            hits = extractor.scan_columns(joined)
            crlf = extractor.holds_crlf(joined)  # (no break of a group's spans two of its blocks)
            counts = extractor.record_counts(joined, group)
            found.extend((split, count, crlf) for split, count in _split_hits(hits, counts))
            start = end
        return found

    def _add(self, stream: HostStream, pipe: Pipe, block: bytes, stamp: int, raw: bytes, hits: Hits,
             count: int, crlf: bool | None) -> None:
        """One block of records (``count`` of them, holding ``hits``) into the pending batch."""
        if not block:
            if self.echo and raw and not self.echo.prefix_hosts:
                self.echo.passthrough(pipe.is_stderr, raw)
            return
        text = stored_text(block, self.extractor.mode, crlf)
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

    @staticmethod
    def _unstored_bytes(pipe: Pipe) -> int:
        """Bytes read from the pipe since the last stored block (what was read, "\r\n" split or not)."""
        counted = pipe.bytes_read - pipe.bytes_stored
        pipe.bytes_stored = pipe.bytes_read
        return counted

    def _flush(self, horizon_ms: int | None = None) -> bool:
        """Hand the pending batch to the writer (``horizon_ms``: it holds every read made before then
        that is not stored); False when the writer is behind (the caller takes no more work)."""
        if self._pending:
            self.writer.put(self._pending, horizon_ms)
            self._pending = Batch(self.job_id)
        self._pending_since = None
        return self.writer.waiting() <= 1

    def close(self) -> None:
        """Close the spool files; the supervisor removes them once the job's end is stored."""
        for stream in self.streams:
            for pipe in stream.pipes:
                if pipe.spool is not None:
                    pipe.spool.close()
                    pipe.spool = None
