"""The readers of a job's pipes, which never wait on anything but the pipe: the job's spooler process
(:class:`Spooler`, the usual one), or a :class:`PipeReader` thread per pipe. Each read goes to the
pipe's spool, framed with its read time (:class:`PipeOutput`), and is noted for the ingestor as a
:class:`Chunk`. When the spool cannot be written, reads are held in memory, within a
:class:`MemoryBudget` for the whole job; past it they are counted and dropped, never silently.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ...parsing.framing import last_break_end
from ..processes import tags
from . import spooler
from .loss import OPEN_RECORD_BYTES, LossCounter
from .spool import FRAME, NOTE, now_ms, spool_frames, write_all

READ_BYTES = 1 << 20


MEMORY_CAP_BYTES = 64 << 20  # output held in memory when the spool cannot be written, for the whole job


POLL_MS = 200


SPOOL_RETRY_MS = spooler.RETRY_MS  # a spool that could not be written is tried again this often


NOTES_READ_BYTES = 1 << 20


NOTES_NAP_S = 0.025  # after a read of a few notes, the next ones gather this long (a wake-up for many, not each)


NOTES_FEW_BYTES = 64 * NOTE.size


STOP_WAIT_S = 5.0  # for the spooler process to end once told to


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
                write_all(self._spool_fd, FRAME.pack(stamp, len(data)), data)
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
    """The pipes of a job's hosts read by the spooler process (:mod:`trainmon.runtime.capture.spooler`), each
    pipe's reads noted into its :class:`PipeOutput` by a thread of this process. The pipes' read ends
    stay open here too, unread: if the process dies, :class:`PipeReader` threads go on from where the
    spool files end, and the job never sees its pipes close."""

    def __init__(self, pipes: list[tuple[int, PipeOutput, int]], tag: str = "") -> None:
        self.pipes = pipes  # (read end, output, the spool offset after what is there already)
        self.tag = tag  # the job's: the process carries it as tags.SPOOLER_VARIABLE, for whoever reaps the job
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
        widen_pipe(notes)
        arguments = [f"{fd}:{offset}:{output.spool_path}" for fd, output, offset in self.pipes]
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", spooler.__file__, str(their_notes), str(their_control), *arguments],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                pass_fds=[their_notes, their_control, *(fd for fd, _, _ in self.pipes)],
                env={**os.environ, tags.SPOOLER_VARIABLE: self.tag})
        except OSError:
            self.process = None
            os.close(notes)
            os.close(control)
        else:
            tags.add_helper(self.process.pid)
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
        tags.remove_helper(self.process.pid)
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


def _truncate(fd: int, size: int) -> None:
    try:
        spooler.cut_to(fd, max(0, size))
    except OSError:
        pass


def widen_pipe(fd: int) -> None:
    """A 1 MiB pipe buffer (Linux) lets the job keep writing through a brief pause of the reader."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):
        pass


def start_spool(output: PipeOutput, preamble: bytes) -> int:
    """A pipe's spool file made anew, holding ``preamble`` (trainmon's own lines, as the job's first
    output) when there is one; where its next frame goes."""
    stamp = now_ms()
    try:
        fd = os.open(output.spool_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if preamble:
                write_all(fd, FRAME.pack(stamp, len(preamble)), preamble)
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
