"""A job's output cut into log records (:class:`RecordCutter`: a line, or a carriage-return update, at
most ``MAX_RECORD_BYTES``), the text stored for each, and the echo of the job's output to the
terminal (:class:`Echo`). A record's timestamp is the wall-clock time (ms) of the read that
completed it.
"""

from __future__ import annotations

import mmap
import sys

from ...parsing.framing import Mode, last_break_end
from ...store.codec import CrBreaks

MAX_RECORD_BYTES = 16 << 20


Piece = tuple[bytes | mmap.mmap, int, int]
"""A read's bytes as ``buffer[start:end]``: a run of spooled reads is mapped from the spool at once (or
read, or held in memory), and each read is a piece of that, never copied on its own."""


def piece_bytes(pieces: list[Piece]) -> int:
    return sum(end - start for _, start, end in pieces)


def _views(pieces: list[Piece]) -> list[memoryview]:
    return [memoryview(buffer)[start:end] for buffer, start, end in pieces if start < end]


def stored_text(block: bytes, mode: Mode, crlf: bool | None = None) -> bytes | memoryview | CrBreaks:
    """A block of whole records as a log chunk holds them, without the last record's break (a view: no
    copy): joined by "\\n", or in the modes that split at "\\r" as read, their "\\r" breaks kept
    (:class:`~trainmon.store.codec.CrBreaks`) where the block is known to hold no "\\r\\n" (``crlf=False``:
    the scan found none; a search for it costs what the rest does); with one, each "\\r\\n" and "\\r"
    becomes a "\\n" here."""
    if mode.splits_on_cr and b"\r" in block:
        if crlf is False:
            return CrBreaks(memoryview(block)[:-1] if block.endswith((b"\n", b"\r")) else block)
        block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return memoryview(block)[:-1] if block.endswith(b"\n") else block


def joined_text(text: bytes | memoryview | CrBreaks, last: int | None = None) -> bytes:
    """A log chunk's records joined by "\\n" (what :func:`stored_text` gave, its "\\r" breaks turned), or
    only its ``last`` bytes."""
    if isinstance(text, CrBreaks):
        return bytes(text.raw[-last:] if last else text.raw).replace(b"\r", b"\n")
    return bytes(text[-last:] if last else text)


def ends_record(last: bytes, mode: Mode) -> bool:
    return last == b"\n" or (last == b"\r" and mode.splits_on_cr)


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
        """The whole records one read completes, with what was pending before it (:meth:`feed_pieces`
        of the read alone); a record that reaches MAX_RECORD_BYTES without a break is cut there."""
        block = self.feed_pieces([(data, 0, len(data))])
        if not block and self.pending_bytes >= MAX_RECORD_BYTES:
            return self.finish()
        return block

    def feed_pieces(self, pieces: list[Piece]) -> bytes:
        """The whole records the pieces complete one after another (the reads of a millisecond), with
        what was pending before them, joined once. Records are never cut here at MAX_RECORD_BYTES:
        the caller feeds read by read (:meth:`feed`) where one might reach it (:meth:`might_cut`)."""
        if self._skip_newline:
            for index, (buffer, start, end) in enumerate(pieces):
                if start < end:
                    self._skip_newline = False
                    if buffer[start] == 10:  # the second half of a "\r\n" split across two reads
                        pieces = [*pieces[:index], (buffer, start + 1, end), *pieces[index + 1:]]
                    break
        for last in range(len(pieces) - 1, -1, -1):
            buffer, start, end = pieces[last]
            cut = last_break_end(buffer, self.mode, start, end)
            if cut > start:
                break
        else:
            rest = [bytes(view) for view in _views(pieces)]
            self._pending.extend(rest)
            self.pending_bytes += sum(map(len, rest))
            return b""
        if not self._pending and last == 0 and start == 0 and cut == len(buffer) and isinstance(buffer, bytes):
            block = buffer  # a whole read in memory, ending with a break
        else:
            block = b"".join([*self._pending, *_views(pieces[:last]), memoryview(buffer)[start:cut]])
        self._pending = [bytes(view) for view in _views([(buffer, cut, end), *pieces[last + 1:]])]
        self.pending_bytes = sum(map(len, self._pending))
        if self.mode.splits_on_cr and not self._pending and block[-1:] == b"\r":
            self._skip_newline = True  # the reads ended on "\r": a "\n" may follow in the next one
        return block

    def might_cut(self, size: int) -> bool:
        """Whether ``size`` more bytes could make the record in progress reach MAX_RECORD_BYTES."""
        return self.pending_bytes + size >= MAX_RECORD_BYTES

    def finish(self) -> bytes:
        block = b"".join(self._pending)
        self._pending, self.pending_bytes = [], 0
        return block

    def dropped(self, *, after_cr: bool) -> bytes:
        """Output was dropped here: the record in progress ends (what is pending, its block), and
        the next starts afresh, just after a "\\r" when ``after_cr``."""
        block = self.finish()
        self.restart(after_cr=after_cr)
        return block

    def restart(self, *, after_cr: bool = False) -> None:
        """Start again at the beginning of a record, what is pending dropped (as a new cutter would);
        ``after_cr``: just after a "\\r", so a "\\n" that comes first is no record break."""
        self._pending, self.pending_bytes = [], 0
        self._skip_newline = after_cr


class Echo:
    """Shows the job's output on the terminal (host-prefixed when several) and, optionally, each
    metric's point right after the line it came from (never in the middle of a progress bar, and
    once for all of a progress bar's redraws: the last, counted). A terminal
    that went away (a closed ssh session) ends the echo, not the capture."""

    def __init__(self, *, prefix_hosts: bool, live_metrics: bool) -> None:
        self.prefix_hosts = prefix_hosts
        self.live_metrics = live_metrics
        self.color = sys.stdout.isatty()
        self.closed = False
        self._at_line_start = True
        self._pending_points: dict[tuple[str, str], tuple[float, int, int]] = {}  # (name, host) -> value, seq, count

    def records(self, host: str, is_stderr: bool, records: list[str]) -> None:
        """Several hosts: whole records, each prefixed by its host, then the points."""
        self._write(is_stderr, "".join(f"{host} | {record}\n" for record in records).encode())
        self.flush_points()

    def passthrough(self, is_stderr: bool, pieces: list[Piece]) -> None:
        """One host: the bytes as the job wrote them (the pieces of its reads, each written as it is,
        never joined); points go after the last complete line."""
        for last in range(len(pieces) - 1, -1, -1):
            buffer, start, end = pieces[last]
            cut = buffer.rfind(b"\n", start, end) + 1
            if cut:
                self._write(is_stderr, *_views([*pieces[:last], (buffer, start, cut)]))
                if not is_stderr:
                    self._at_line_start = True
                rest = [(buffer, cut, end), *pieces[last + 1:]]
                break
        else:
            rest = pieces
        self.flush_points()
        if piece_bytes(rest):
            self._write(is_stderr, *_views(rest))
            if not is_stderr:
                self._at_line_start = False

    def _write(self, is_stderr: bool, *parts: bytes | memoryview) -> None:
        if self.closed:
            return
        target = sys.stderr if is_stderr else sys.stdout
        try:
            target.flush()
            for part in parts:
                target.buffer.write(part)
            target.flush()
        except (OSError, ValueError):
            self.closed = True  # a closed terminal must not stop the capture

    def point(self, name: str, value: float, host: str, seq: int) -> None:
        """A point to show after the line it came from; a metric's later points before that line
        ends (a progress bar's redraws) replace its earlier ones, counted."""
        if not self.live_metrics or self.closed:
            return
        earlier = self._pending_points.pop((name, host), None)
        self._pending_points[(name, host)] = (value, seq, 1 + (earlier[2] if earlier else 0))

    def flush_points(self) -> None:
        if self._pending_points and (self._at_line_start or self.prefix_hosts):
            lines = []
            for (name, host), (value, seq, count) in self._pending_points.items():
                more = f"; {count} points, the last shown" if count > 1 else ""
                text = f"  » {name} = {value:g}   ({host}, record {seq + 1}{more})"
                lines.append(f"\x1b[2m{text}\x1b[0m" if self.color else text)
            self._write(False, ("\n".join(lines) + "\n").encode())
            self._pending_points.clear()
