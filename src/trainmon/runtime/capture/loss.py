"""What was dropped, counted: a :class:`Loss` is the bytes, records and points of output that could not
be kept (a full disk past the memory budget, a batch the store never took), and a
:class:`LossCounter` counts them from the dropped bytes themselves (records by their breaks, points
by matching), so the job's loss is recorded on it, never silent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...jobs.document import UnstoredOutput
from ...parsing.definitions import MetricDefinition
from ...parsing.extract import Extractor
from ...parsing.framing import Mode
from .records import RecordCutter, ends_record

OPEN_RECORD_BYTES = 64 << 10  # of a record a drop starts in: what is matched with its dropped rest


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
        self._kept_start = None if ends_record(last_kept, mode) else open_record
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
