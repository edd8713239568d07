"""Plain records that cross the store boundary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..jobs.document import JobDocument, SupervisorIdentity
from .codec import PackedTexts, Text


@dataclass
class JobRow:
    id: int
    name: str
    status: str
    creation_time: float
    last_modified_time: float
    doc: JobDocument
    supervisor: SupervisorIdentity | None
    stop_requested: str | None
    diagnostics: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class StreamRow:
    id: int
    job_id: int
    host: str
    name: str
    creation_ms: int
    first_event_ms: int | None
    last_event_ms: int | None
    last_ingestion_ms: int | None
    records: int
    stored_bytes: int


class EventRow(NamedTuple):
    """One log record (a tuple: reading a log back makes millions of them)."""

    stream_id: int
    seq: int
    timestamp_ms: int
    message: str


class PointColumns(NamedTuple):
    """One metric's points of a job as columns in time order, each with the log record it came
    from: what a chart of a million points reads without an object per point."""

    stamps: np.ndarray  # int64 ms
    values: np.ndarray  # float64, NaN and infinities as printed
    streams: np.ndarray  # int64 log stream ids
    seqs: np.ndarray  # int64 record positions in their stream


class JobPoints(NamedTuple):
    """A job's points of some metrics as columns, in time order, then by log stream, position in it
    and metric name: what a reader of many points takes without an object per point."""

    names: list[str]  # the metrics, sorted; ``metrics`` indexes them
    hosts: dict[int, str]  # each log stream's host
    stamps: np.ndarray  # int64 ms
    streams: np.ndarray  # int64 log stream ids
    seqs: np.ndarray  # int64 record positions in their stream
    metrics: np.ndarray  # int64 indexes into names
    values: np.ndarray  # float64, NaN and infinities as printed


@dataclass(frozen=True, slots=True)
class PointRow:
    """A metric point and the log record it came from (``stream_id``, ``seq``)."""

    name: str
    timestamp_ms: int
    value: float
    host: str
    stream_id: int
    seq: int


ChunkTuple = tuple[int, int, int, int, Text]
"""A log chunk to store: stream_id, first_seq, count, timestamp_ms, and its records joined by "\n" (the
bytes as read: invalid UTF-8 is replaced when they are read back), or as read with their "\r" breaks
(:class:`~trainmon.store.codec.CrBreaks`)."""
PointTuple = tuple[str, int, "float | None", str, int, int]  # name, timestamp_ms, value (None = NaN), host, stream_id, seq


class PointBlock(NamedTuple):
    """The points of one block of a log stream's records, as columns (what the job writer makes of a
    read): one host, stream and time; each point's metric by its index in ``names``."""

    names: Sequence[str]
    timestamp_ms: int
    host: str
    stream_id: int
    seqs: np.ndarray  # int64 record positions in the stream
    metrics: np.ndarray  # int64 indexes into names
    values: np.ndarray  # float64, NaN and infinities as printed


@dataclass
class Batch:
    """What one ingestion step writes in a single transaction (plain tuples and columns: this is the
    hot path). Points come as tuples, or as columns a block at a time."""

    job_id: int
    chunks: list[ChunkTuple] = field(default_factory=list)
    points: list[PointTuple] = field(default_factory=list)
    point_blocks: list[PointBlock] = field(default_factory=list)
    stream_stats: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # id -> (records, bytes, last_ms)
    diagnostics: list[dict[str, Any]] | None = None
    spools: dict[tuple[int, str], tuple[int, bool]] = field(default_factory=dict)  # (stream, pipe) -> consumed
    text_bytes: int = 0
    block_points: int = 0  # points in point_blocks
    packing: PackedTexts | None = None  # its chunks' texts as stored, once begun (:meth:`pack`)

    def __bool__(self) -> bool:
        return bool(self.chunks or self.points or self.point_blocks or self.diagnostics is not None)

    @property
    def point_count(self) -> int:
        return len(self.points) + self.block_points

    def add_points(self, block: PointBlock) -> None:
        self.point_blocks.append(block)
        self.block_points += len(block.seqs)

    def pack(self) -> PackedTexts:
        """Its chunks' texts as stored: begun now (the large ones on the packing threads) unless they were."""
        if self.packing is None:
            self.packing = PackedTexts([text for *_, text in self.chunks])
        return self.packing


@dataclass
class Maintenance:
    """What one maintenance pass did."""

    ran: bool = True
    sealed_chunks: int = 0
    sealed_points: int = 0
    rolled_series: int = 0  # series that had data to roll up
    retiered_series: int = 0  # series whose roll-ups were brought to a changed policy's tiers
    retiered_rows: int = 0  # the roll-up rows written for those tiers
    tiers_before: tuple[int, ...] = ()  # the tier periods the store had before they changed (then)
    rollup_rows: int = 0
    expired_chunks: int = 0
    expired_rollups: int = 0
    overviews: int = 0  # chunks sealed before overviews existed that were given one


@dataclass
class AlarmRow:
    """A metric alarm: its configuration (PutMetricAlarm's members, as given) and its state.

    ``revision`` grows with every write, so a write made from an older reading (an evaluation
    while the alarm was changed) can tell and is dropped. ``next_ms`` is when it is evaluated
    next, every ``every_ms`` (10 s for a high-resolution period, else a minute)."""

    name: str
    config: dict[str, Any]
    state: str
    reason: str
    reason_data: str | None
    state_updated_ms: int
    transitioned_ms: int
    evaluation_state: str | None
    configured_ms: int
    every_ms: int
    next_ms: int = 0
    revision: int = 0


@dataclass(frozen=True, slots=True)
class AlarmHistoryRow:
    """One item of an alarm's history (DescribeAlarmHistory's AlarmHistoryItem); ``id`` orders
    items of one millisecond."""

    alarm_name: str
    timestamp_ms: int
    item_type: str  # ConfigurationUpdate, StateUpdate or Action
    summary: str
    data: str
    id: int = 0


ChunkRow = tuple[int, int, int, str]  # a stored log chunk: first_seq, count (of records), timestamp_ms, text
