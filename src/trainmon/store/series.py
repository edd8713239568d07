"""Metric time series: chunks, roll-ups and their maintenance, in the SQL both backends run.

Every metric is a row of ``series``: CloudWatch's identity (namespace, name, dimensions, with a
SHA-256 digest as the unique key), the job it belongs to for metrics parsed from a job's log
(namespace ``/aws/sagemaker/TrainingJobs``, dimension ``TrainingJobName``), the newest time
(for ListMetrics), the job summaries ``describe`` shows (points, minimum, maximum, last finite
value) and ``rolled_ms``, the time before which every roll-up tier is complete.

Data lives in ``chunks``: a job's points (time, value, log position) per host and log stream,
or PutMetricData's datapoints (time, value, count, sum, minimum, maximum) per unit. A write
adds one packed chunk per series and batch (:mod:`trainmon.store.codec`); maintenance later
seals a series' chunks into compressed ones of up to ``SEAL_POINTS`` points, once no write has
touched them for ``SEAL_AFTER_MS``.

``rollups`` holds, per series, tier period, period start and unit, a statistic set and a
quantile sketch (:mod:`trainmon.cloudwatch.sketch`). Maintenance rolls the raw data of whole
coarsest-tier periods up into every tier (each tier from the finer one), then moves
``rolled_ms`` on. A write older than ``rolled_ms`` (PutMetricData accepts two weeks back) is
merged into the roll-ups it belongs to in the same transaction, so they stay exact.
GetMetricStatistics reads the coarsest tier that divides its period for the rolled part of its
range and rolls the rest up from the raw data on the fly.

Maintenance works in one short transaction per series and step, so writers wait milliseconds
at most and readers not at all; one process at a time does it, under a lease in ``maintenance``.

SQL here uses ``?`` placeholders; the backends' :class:`Sql` adapters render them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..cloudwatch.datapoints import Datapoints, Metric
from ..cloudwatch.model import MetricKey, job_metric_key
from ..cloudwatch.retention import Retention
from ..cloudwatch.sketch import Rollups, concat
from ..cloudwatch.statistics import Columns, Sample, concat_columns
from . import codec, overview
from .rows import JobPoints, Maintenance, PointBlock, PointColumns, PointRow, PointTuple
from .sql import Sql, Transaction

log = logging.getLogger(__name__)
_NO_INTS = np.empty(0, np.int64)
POINTS, SAMPLES = 0, 1  # chunk kinds: a job's log points; PutMetricData's datapoints
SEAL_POINTS = 8192
SEAL_ON_WRITE_ROWS = 128  # a write this big is stored sealed at once: the file never holds its packed form
SEAL_AFTER_MS = 60_000
ROLL_LAG_MS = 60_000  # roll a period up this long after it ends, when late writes have landed
LEASE_MS = 600_000
EXPIRE_BATCH = 200  # series expired per transaction (index seeks each; writers wait a few ms at most)
OVERVIEW_BACKFILL = 256  # chunks sealed before overviews existed given one a pass (about 0.2 s)


def digest(key: MetricKey) -> bytes:
    return hashlib.sha256(f"{key.namespace}\0{key.name}\0{key.dimensions_json}".encode()).digest()


_UPSERT_SERIES = """
INSERT INTO series (namespace, name, dimensions, digest, job_id, last_ms, points, minimum, maximum,
                    final_value, final_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (digest) DO UPDATE SET
    job_id = coalesce(excluded.job_id, series.job_id),
    last_ms = {greatest}(series.last_ms, excluded.last_ms),
    points = series.points + excluded.points,
    minimum = CASE WHEN excluded.minimum < series.minimum OR series.minimum IS NULL
                   THEN excluded.minimum ELSE series.minimum END,
    maximum = CASE WHEN excluded.maximum > series.maximum OR series.maximum IS NULL
                   THEN excluded.maximum ELSE series.maximum END,
    final_value = CASE WHEN excluded.final_ms >= series.final_ms OR series.final_ms IS NULL
                       THEN excluded.final_value ELSE series.final_value END,
    final_ms = CASE WHEN excluded.final_ms >= series.final_ms OR series.final_ms IS NULL
                    THEN excluded.final_ms ELSE series.final_ms END
"""  # {greatest}: the backend's (Sql.greatest)
_UPSERT = _UPSERT_SERIES + "RETURNING id, rolled_ms\n"  # a series' (id, rolled_ms), for a job's writes
_INSERT_CHUNK = (
    "INSERT INTO chunks (series_id, kind, host, stream_id, unit, resolution, first_ms, last_ms, count, sealed, data, "
    "overview) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_CHUNK_COLUMNS = "id, kind, host, stream_id, unit, resolution, sealed, data, series_id"


@dataclass
class _Summary:
    """What a batch adds to a job metric's summary."""

    points: int = 0
    minimum: float | None = None
    maximum: float | None = None
    final: tuple[int, float] | None = None  # (timestamp_ms, value)
    chunks: list[tuple[str, int, np.ndarray, np.ndarray, np.ndarray, list[Encoded]]] = field(default_factory=list)

    def add(self, host: str, stream: int, stamps: np.ndarray, values: np.ndarray, seqs: np.ndarray) -> None:
        self.points += len(stamps)
        self.chunks.append((host, stream, stamps, values, seqs, encode(POINTS, [stamps, values, seqs])))
        finite = np.flatnonzero(np.isfinite(values))
        if not len(finite):
            return
        low, high = float(values[finite].min()), float(values[finite].max())
        self.minimum = low if self.minimum is None else min(self.minimum, low)
        self.maximum = high if self.maximum is None else max(self.maximum, high)
        times = stamps[finite]
        last = finite[np.flatnonzero(times == times.max())[-1]]
        if self.final is None or stamps[last] >= self.final[0]:
            self.final = (int(stamps[last]), float(values[last]))


# -- writes ---------------------------------------------------------------------------------


Encoded = tuple[int, int, int, int, bytes, bytes | None]  # first_ms, last_ms, rows, sealed, blob, overview


def encode(kind: int, columns: list[np.ndarray]) -> list[Encoded]:
    """A write's chunks: packed when small, else sorted and encoded at once in chunks of up to
    ``SEAL_POINTS``, as maintenance would seal them, so that a large write never takes the room of
    its packed form. A chunk is marked sealed (left alone by maintenance) only when full; the
    others, whatever their encoding, maintenance merges with their neighbours later. Done before
    the write's transaction, so the store's lock is not held for it."""
    rows = len(columns[0])
    if rows < SEAL_ON_WRITE_ROWS:
        return [(int(columns[0].min()), int(columns[0].max()), rows, 0, codec.pack(columns), None)]
    return [(first, last, count, int(count == SEAL_POINTS), blob, summary)
            for first, last, count, blob, summary in _sealed_pieces(kind, columns, partial_overviews=False)]


def _sealed_pieces(kind: int, columns: list[np.ndarray], *, partial_overviews: bool = True,
                   ) -> list[tuple[int, int, int, bytes, bytes | None]]:
    """Columns in time order (a job's points then by record) as sealed chunks of up to SEAL_POINTS
    rows: (first_ms, last_ms, rows, blob, the overview of a job's points for charts). Without
    ``partial_overviews`` (a write's own pieces: maintenance seals the last one again, merged with
    its neighbours) only full chunks get an overview."""
    stamps = columns[0]
    order = np.lexsort((columns[2], stamps)) if kind == POINTS else np.argsort(stamps, kind="stable")
    columns = [column[order] for column in columns]
    pieces = []
    for start in range(0, len(stamps), SEAL_POINTS):
        piece = [column[start:start + SEAL_POINTS] for column in columns]
        rows = len(piece[0])
        summarized = kind == POINTS and rows > overview.BLOCK and (partial_overviews or rows == SEAL_POINTS)
        summary = overview.of_points(piece) if summarized else None
        pieces.append((int(piece[0][0]), int(piece[0][-1]), rows, codec.seal(piece), summary))
    return pieces


def prepare_points(points: list[PointTuple], blocks: Sequence[PointBlock] = ()) -> dict[str, _Summary]:
    """A batch's points (tuples: name, timestamp_ms, value or None for NaN, host, stream_id, seq;
    and blocks of columns) as packed chunks and summaries per metric: the work done before the
    transaction, so that writers hold the store's lock only for the inserts."""
    summaries: dict[str, _Summary] = {}
    for source in (_groups(points) if points else (), _block_groups(blocks) if blocks else ()):
        for (name, host, stream), stamps, values, seqs in source:
            summaries.setdefault(name, _Summary()).add(host, stream, stamps, values, seqs)
    return summaries


def write_points(sql: Sql, job_id: int, summaries: dict[str, _Summary], periods: Sequence[int]) -> None:
    """Store what ``prepare_points`` made of a batch."""
    found = sql.rows("SELECT name FROM jobs WHERE id = ?", (job_id,))
    if not found:
        return  # the job was deleted while its last records were being stored
    job = found[0][0]
    chunk_rows: list[tuple[Any, ...]] = []
    ids: dict[str, int] = {}
    keys = {name: job_metric_key(job, name) for name in summaries}
    digests = {name: digest(key) for name, key in keys.items()}
    for name, summary in sorted(summaries.items(), key=lambda item: digests[item[0]]):  # one lock order
        key = keys[name]
        last = max(int(c[2].max()) for c in summary.chunks)
        final_ms, final_value = summary.final or (None, None)
        series_id, rolled_ms = sql.rows(_UPSERT.format(greatest=sql.greatest), (
            key.namespace, key.name, key.dimensions_json, digests[name], job_id, last, summary.points,
            summary.minimum, summary.maximum, final_value, final_ms,
        ))[0]
        ids[name] = series_id
        for _, _, stamps, values, _, _ in summary.chunks:
            if stamps.min() < rolled_ms:
                late = (stamps < rolled_ms) & np.isfinite(values)
                ones = np.ones(int(late.sum()))
                v = values[late]
                _merge_late(sql, series_id, "None", _rollups(Columns(stamps[late], ones, v, v, v, v)), periods)
    for name, summary in summaries.items():  # in the batch's order
        for host, stream, _, _, _, encoded in summary.chunks:
            chunk_rows.extend((ids[name], POINTS, host, stream, "None", 1, first, last, rows, sealed, blob, summary)
                              for first, last, rows, sealed, blob, summary in encoded)
    sql.many(_INSERT_CHUNK, chunk_rows)


Group = tuple[tuple[str, str, int], np.ndarray, np.ndarray, np.ndarray]  # (name, host, stream), stamps, values, seqs


def _groups(points: list[PointTuple]) -> Iterator[Group]:
    """A batch's points per (name, host, stream), in the batch's order, as columns. Column-wise
    (one pass per column in C, then numpy) because this runs for every point stored."""
    names, stamps, values, hosts, streams, seqs = zip(*points, strict=True)
    size = len(names)
    stamp_array = np.fromiter(stamps, np.int64, size)
    value_array = np.fromiter(values, np.float64, size)  # None (NaN) becomes NaN
    seq_array = np.fromiter(seqs, np.int64, size)
    labels: Sequence[Any] = names
    if hosts.count(hosts[0]) != size or streams.count(streams[0]) != size:
        labels = list(zip(names, hosts, streams, strict=True))
    keys = {label: code for code, label in enumerate(dict.fromkeys(labels))}  # in order of appearance
    codes = np.fromiter(map(keys.__getitem__, labels), np.int64, size)
    if labels is names:
        keys = {(name, hosts[0], streams[0]): code for name, code in keys.items()}
    yield from _split(list(keys), codes, stamp_array, value_array, seq_array)


def _block_groups(blocks: Sequence[PointBlock]) -> Iterator[Group]:
    """:func:`_groups` of blocks of columns: a block's metrics coded by a table of its own, the
    groups in order of their first point."""
    keys: dict[tuple[str, str, int], int] = {}
    codes = []
    for block in blocks:
        table = np.array([keys.setdefault((name, block.host, block.stream_id), len(keys)) for name in block.names],
                         np.int64)
        codes.append(table[block.metrics])
    code_array = np.concatenate(codes)
    stamps = np.concatenate([np.full(len(block.seqs), block.timestamp_ms, np.int64) for block in blocks])
    values = np.concatenate([block.values for block in blocks])
    seqs = np.concatenate([block.seqs for block in blocks])
    present, first = np.unique(code_array, return_index=True)
    order = present[np.argsort(first)]  # codes in order of their first point
    renumber = np.empty(len(keys), np.int64)
    renumber[order] = np.arange(len(order))
    labels = list(keys)
    yield from _split([labels[code] for code in order.tolist()], renumber[code_array], stamps, values, seqs)


def _split(labels: list[tuple[str, str, int]], codes: np.ndarray, stamps: np.ndarray, values: np.ndarray,
           seqs: np.ndarray) -> Iterator[Group]:
    """Columns split per label (``codes``: each row's label, numbered by first appearance)."""
    if len(labels) == 1:
        yield labels[0], stamps, values, seqs
        return
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(labels) + 1))
    for code, label in enumerate(labels):
        rows = order[bounds[code]:bounds[code + 1]]
        yield label, stamps[rows], values[rows], seqs[rows]


PreparedSamples = list[tuple[MetricKey, bytes, int, list[tuple[str, list[np.ndarray], list[Encoded]]]]]
"""A PutMetricData call's datapoints per metric and unit, as columns and encoded chunks:
(key, digest, resolution, [(unit, columns, chunks)])."""


def prepare_samples(items: list[tuple[MetricKey, int, list[Sample]]]) -> PreparedSamples:
    """What ``put_samples`` writes, made before the transaction (the lock is held for the inserts
    only). Each item is a write of its own: a caller gives a metric's samples of one resolution
    together (``cloudwatch.model.parse_put`` groups a request's items so)."""
    metrics = []
    for key_digest, key, resolution, samples in sorted(  # one lock order
            ((digest(key), key, resolution, samples) for key, resolution, samples in items if samples),
            key=lambda entry: (entry[0], entry[2])):
        by_unit: dict[str, list[Sample]] = {}
        for sample in samples:
            by_unit.setdefault(sample.unit, []).append(sample)
        units = []
        for unit, group in by_unit.items():
            columns = _sample_columns(group)
            units.append((unit, columns, encode(SAMPLES, columns)))
        metrics.append((key, key_digest, resolution, units))
    return metrics


def prepare_datapoints(blocks: Sequence[Datapoints]) -> PreparedSamples:
    """What ``put_samples`` writes of PutMetricData calls queued together (store.buffer): one
    chunk per metric and unit however many calls gave it datapoints, each in the calls' order."""
    # Metrics by identity: calls share their metrics' objects (cloudwatch.datapoints keeps one per
    # metric), and hashing a metric's key costs more than the rest; an equal one that is not the
    # same object only makes a second chunk.
    table: dict[int, int] = {}
    metrics: list[Metric] = []
    codes = []
    for block in blocks:
        renumber = []
        for metric in block.metrics:
            code = table.get(id(metric))
            if code is None:
                code = table[id(metric)] = len(metrics)
                metrics.append(metric)
            renumber.append(code)
        codes.append(np.array(renumber, np.int64)[block.codes])
    code_array = np.concatenate(codes)
    stamps = np.concatenate([block.timestamp_ms for block in blocks])
    values = np.concatenate([block.value for block in blocks])
    stats = None  # the common case: single values, no count, sum, minimum and maximum to copy
    if any(block.stats is not None for block in blocks):
        stats = [np.concatenate(parts) for parts in zip(*(block.columns()[2:] for block in blocks), strict=True)]
    order = np.argsort(code_array, kind="stable")
    bounds = np.searchsorted(code_array[order], np.arange(len(metrics) + 1)).tolist()
    by_metric: dict[tuple[MetricKey, int], list[tuple[str, list[np.ndarray], list[Encoded]]]] = {}
    for code, (key, resolution, unit) in enumerate(metrics):
        rows = order[bounds[code]:bounds[code + 1]]
        value = values[rows]
        columns = [stamps[rows], value, *([np.ones(len(rows)), value, value, value] if stats is None
                                          else [column[rows] for column in stats])]
        by_metric.setdefault((key, resolution), []).append((unit, columns, encode(SAMPLES, columns)))
    prepared = [(key, digest(key), resolution, units) for (key, resolution), units in by_metric.items()]
    return sorted(prepared, key=lambda entry: (entry[1], entry[2]))  # one lock order


def datapoints_stored(sql: Sql, prepared: PreparedSamples) -> bool:
    """Whether a write of ``prepared`` was committed already (its reply lost): its first chunk is
    in the store, as written."""
    if not prepared:
        return False
    key, key_digest, resolution, units = prepared[0]
    unit, _, encoded = units[0]
    first, last, rows, _, blob, _ = encoded[0]
    return bool(sql.rows(
        "SELECT 1 FROM chunks WHERE series_id = (SELECT id FROM series WHERE digest = ?) AND kind = ? AND unit = ? "
        "AND resolution = ? AND first_ms = ? AND last_ms = ? AND count = ? AND data = ?",
        (key_digest, SAMPLES, unit, resolution, first, last, rows, blob)))


def put_samples(sql: Sql, prepared: PreparedSamples, periods: Sequence[int]) -> None:
    """A PutMetricData call's datapoints, as ``prepare_samples`` made them: the series upserted in
    one statement, looked up in another, their chunks inserted in a third, however many metrics
    the call holds."""
    chunk_rows: list[tuple[Any, ...]] = []
    upserts: dict[bytes, tuple[Any, ...]] = {}
    for key, key_digest, _, units in prepared:  # several resolutions (or items) of one metric: one row
        last = max(int(columns[0].max()) for _, columns, _ in units)
        previous = upserts.get(key_digest)
        if previous is None or previous[5] < last:
            upserts[key_digest] = (key.namespace, key.name, key.dimensions_json, key_digest, None, last, 0, None, None,
                                   None, None)
    sql.many(_UPSERT_SERIES.format(greatest=sql.greatest), upserts.values())
    found = _series_ids(sql, list(upserts))
    for _, key_digest, resolution, units in prepared:
        series_id, rolled_ms = found[key_digest]
        for unit, columns, encoded in units:
            chunk_rows.extend((series_id, SAMPLES, "", 0, unit, resolution, first, last_ms, rows, sealed, blob, summary)
                              for first, last_ms, rows, sealed, blob, summary in encoded)
            stamps = columns[0]
            if stamps.min() < rolled_ms:
                late = stamps < rolled_ms
                stamp, value, count, total, low, high = (c[late] for c in columns)
                _merge_late(sql, series_id, unit, _rollups(Columns(stamp, count, total, low, high, value)), periods)
    sql.many(_INSERT_CHUNK, chunk_rows)


def _series_ids(sql: Sql, digests: list[bytes]) -> dict[bytes, tuple[int, int]]:
    """digest -> (id, rolled_ms) of existing series, in slices under every driver's limit of parameters."""
    found: dict[bytes, tuple[int, int]] = {}
    for first in range(0, len(digests), 500):
        part = digests[first:first + 500]
        for key_digest, series_id, rolled_ms in sql.rows(
                f"SELECT digest, id, rolled_ms FROM series WHERE digest IN ({','.join('?' * len(part))})", part):
            found[bytes(key_digest)] = (series_id, rolled_ms)
    return found


def _sample_columns(samples: list[Sample]) -> list[np.ndarray]:
    return [
        np.array([s.timestamp_ms for s in samples], np.int64),
        np.array([s.value for s in samples], np.float64),  # None (a statistic set) becomes NaN
        np.array([s.count for s in samples], np.float64),
        np.array([s.sum for s in samples], np.float64),
        np.array([s.minimum for s in samples], np.float64),
        np.array([s.maximum for s in samples], np.float64),
    ]


def _rollups(datapoints: Columns) -> Rollups:
    """Datapoints in any order as roll-up rows, one each."""
    return Rollups.from_samples(*concat_columns([datapoints]))


def _merge_late(sql: Sql, series_id: int, unit: str, late: Rollups, periods: Sequence[int]) -> None:
    """Fold datapoints older than ``rolled_ms`` into every tier's stored roll-ups."""
    if not len(late):
        return  # only NaN or infinite points: nothing for the statistics
    finer = late
    for period in periods:
        fresh = finer.roll(0, period * 1000)
        low, high = int(fresh.timestamp_ms[0]), int(fresh.timestamp_ms[-1]) + 1
        stored = _read_rollups(sql, series_id, period, low, high, unit).get(unit, Rollups.empty())
        merged = concat([stored, fresh]).roll(0, period * 1000)
        sql.rows("DELETE FROM rollups WHERE series_id = ? AND period = ? AND unit = ? AND timestamp_ms >= ? "
                 "AND timestamp_ms < ?", (series_id, period, unit, low, high))
        _insert_rollups(sql, series_id, period, unit, merged)
        finer = fresh


def _insert_rollups(sql: Sql, series_id: int, period: int, unit: str, rolled: Rollups) -> None:
    sql.many(
        "INSERT INTO rollups (series_id, period, timestamp_ms, unit, count, sum, minimum, maximum, sketch) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        zip([series_id] * len(rolled), [period] * len(rolled), rolled.timestamp_ms.tolist(), [unit] * len(rolled),
            rolled.count.tolist(), rolled.sum.tolist(), rolled.minimum.tolist(), rolled.maximum.tolist(),
            rolled.sketches(), strict=True),
    )


# -- reads ----------------------------------------------------------------------------------


@dataclass
class RawChunk:
    id: int
    series_id: int
    kind: int
    host: str
    stream_id: int
    unit: str
    columns: list[np.ndarray]


def _chunks(sql: Sql, condition: str, args: Sequence[Any], start_ms: int | None, end_ms: int | None) -> list[RawChunk]:
    return _decoded(_chunk_rows(sql, condition, args, start_ms, end_ms), start_ms, end_ms)


def _chunk_rows(sql: Sql, condition: str, args: Sequence[Any], start_ms: int | None,
                end_ms: int | None) -> list[tuple[Any, ...]]:
    """The chunk rows that may hold points in the range, as stored (decoding them needs no lock)."""
    where, values = _in_range(condition, args, start_ms, end_ms)
    return sql.rows(f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE {where} ORDER BY id", values)


def _in_range(condition: str, args: Sequence[Any], start_ms: int | None, end_ms: int | None) -> tuple[str, list[Any]]:
    """``condition`` (with ``args``) narrowed to the chunks that may hold points in [start_ms, end_ms)."""
    where, values = condition, list(args)
    if start_ms is not None:
        where += " AND last_ms >= ?"
        values.append(start_ms)
    if end_ms is not None:
        where += " AND first_ms < ?"
        values.append(end_ms)
    return where, values


def _decoded(rows: list[tuple[Any, ...]], start_ms: int | None, end_ms: int | None) -> list[RawChunk]:
    found = []
    for id_, kind, host, stream, unit, _, _, data, series in rows:
        columns = codec.unpack(bytes(data))
        if start_ms is not None or end_ms is not None:
            stamps = columns[0]
            keep = (stamps >= (start_ms if start_ms is not None else stamps.min())) & \
                (stamps < (end_ms if end_ms is not None else stamps.max() + 1))
            columns = [column[keep] for column in columns]
        found.append(RawChunk(id_, series, kind, host, stream, unit, columns))
    return found


def series_id(sql: Sql, key: MetricKey) -> tuple[int, int] | None:
    """(id, rolled_ms) of a metric, if it exists."""
    found = sql.rows("SELECT id, rolled_ms FROM series WHERE digest = ?", (digest(key),))
    return (found[0][0], found[0][1]) if found else None


def job_points(sql: Sql, job_id: int, *, names: list[str] | None, host: str | None, start_ms: int | None,
               end_ms: int | None) -> list[PointRow]:
    """A job's points in time order, then by log stream, position in it and metric name (the
    metrics of one record by name, whatever order they were stored in)."""
    found = job_point_columns(sql, job_id, names=names, host=host, start_ms=start_ms, end_ms=end_ms)
    return [PointRow(found.names[metric], stamp, value, found.hosts[stream], stream, seq)
            for stamp, stream, seq, metric, value in zip(found.stamps.tolist(), found.streams.tolist(),
                                                         found.seqs.tolist(), found.metrics.tolist(),
                                                         found.values.tolist(), strict=True)]


def job_point_columns(sql: Sql, job_id: int, *, names: list[str] | None, host: str | None, start_ms: int | None,
                      end_ms: int | None) -> JobPoints:
    """:func:`job_points` as columns: what a reader of many points (the rules) takes, without an
    object per point."""
    condition = "kind = 0 AND series_id IN (SELECT id FROM series WHERE job_id = ?"
    args: list[Any] = [job_id]
    if names:
        condition += f" AND name IN ({','.join('?' * len(names))})"
        args.extend(names)
    condition += ")"
    if host:
        condition += " AND host = ?"
        args.append(host)
    chunks = _chunks(sql, condition, args, start_ms, end_ms)
    # the names after the chunks: a series row comes before its first chunk and outlives it, so
    # every chunk read has its name, even when the two reads see different moments (PostgreSQL)
    names_of = dict(sql.rows("SELECT id, name FROM series WHERE job_id = ?", (job_id,)))
    if not chunks:
        return JobPoints([], {}, _NO_INTS, _NO_INTS, _NO_INTS, _NO_INTS, np.empty(0))
    ordered = sorted({names_of[chunk.series_id] for chunk in chunks})
    rank = {name: index for index, name in enumerate(ordered)}
    hosts = {chunk.stream_id: chunk.host for chunk in chunks}
    stamps = np.concatenate([chunk.columns[0] for chunk in chunks])
    values = np.concatenate([chunk.columns[1] for chunk in chunks])
    seqs = np.concatenate([chunk.columns[2] for chunk in chunks])
    streams = np.concatenate([np.full(len(chunk.columns[0]), chunk.stream_id, np.int64) for chunk in chunks])
    metrics = np.concatenate([np.full(len(chunk.columns[0]), rank[names_of[chunk.series_id]], np.int64)
                              for chunk in chunks])
    order = np.lexsort((metrics, seqs, streams, stamps))
    return JobPoints(ordered, hosts, stamps[order], streams[order], seqs[order], metrics[order], values[order])


def _of_metric(job_id: int, name: str, host: str | None) -> tuple[str, list[Any]]:
    condition = "kind = 0 AND series_id IN (SELECT id FROM series WHERE job_id = ? AND name = ?)"
    args: list[Any] = [job_id, name]
    if host:
        condition += " AND host = ?"
        args.append(host)
    return condition, args


def point_rows(sql: Sql, job_id: int, name: str, *, host: str | None, start_ms: int | None,
               end_ms: int | None) -> list[tuple[Any, ...]]:
    """The chunk rows of one metric of a job, for :func:`point_columns` (which needs no transaction)."""
    return _chunk_rows(sql, *_of_metric(job_id, name, host), start_ms, end_ms)


def point_columns(rows: list[tuple[Any, ...]], start_ms: int | None, end_ms: int | None) -> PointColumns:
    """The points of :func:`point_rows` as columns, in time order, then by log stream and position."""
    return _columns(_decoded(rows, start_ms, end_ms))


_EDGE = 2**62  # a range without a start or an end reaches this far


def chart_rows(sql: Sql, job_id: int, name: str, *, host: str | None, start_ms: int | None,
               end_ms: int | None, width: int) -> list[tuple[Any, ...]]:
    """The chunk rows of one metric of a job for a chart ``width`` pixels wide, for
    :func:`chart_columns`: where the range holds ``overview.DENSE`` points a pixel or more, a chunk
    that lies wholly in it gives its overview instead of its points (each row ends with its count
    and whether it did)."""
    ranged, values = _in_range(*_of_metric(job_id, name, host), start_ms, end_ms)
    [(held,)] = sql.rows(f"SELECT coalesce(sum(count), 0) FROM chunks WHERE {ranged}", values)
    if int(held) < width * overview.DENSE:
        return sql.rows(f"SELECT {_CHUNK_COLUMNS}, count, 0 FROM chunks WHERE {ranged} ORDER BY id", values)
    low = start_ms if start_ms is not None else -_EDGE
    high = end_ms if end_ms is not None else _EDGE
    inside = "overview IS NOT NULL AND first_ms >= ? AND last_ms < ?"
    return sql.rows(
        f"SELECT id, kind, host, stream_id, unit, resolution, sealed, CASE WHEN {inside} THEN overview ELSE data END, "
        f"series_id, count, CASE WHEN {inside} THEN 1 ELSE 0 END FROM chunks WHERE {ranged} ORDER BY id",
        [low, high, low, high, *values])


def chart_columns(rows: list[tuple[Any, ...]], start_ms: int | None, end_ms: int | None) -> tuple[PointColumns, int]:
    """The points of :func:`chart_rows` as columns (overviews' representatives for the chunks that
    gave one), and how many points the range holds."""
    chunks = _decoded([row[:9] for row in rows], start_ms, end_ms)
    held = sum(int(row[9]) if row[10] else len(chunk.columns[0]) for row, chunk in zip(rows, chunks, strict=True))
    return _columns(chunks), held


def _columns(chunks: list[RawChunk]) -> PointColumns:
    if not chunks:
        empty = np.empty(0, np.int64)
        return PointColumns(empty, np.empty(0, np.float64), empty, empty)
    stamps = np.concatenate([c.columns[0] for c in chunks]).astype(np.int64, copy=False)
    values = np.concatenate([c.columns[1] for c in chunks]).astype(np.float64, copy=False)
    seqs = np.concatenate([c.columns[2] for c in chunks]).astype(np.int64, copy=False)
    streams = np.repeat(np.array([c.stream_id for c in chunks], np.int64), [len(c.columns[0]) for c in chunks])
    if _in_order(stamps, streams, seqs):  # one host's chunks, as written: no sort
        return PointColumns(stamps, values, streams, seqs)
    order = np.lexsort((seqs, streams, stamps))
    return PointColumns(stamps[order], values[order], streams[order], seqs[order])


def _in_order(stamps: np.ndarray, streams: np.ndarray, seqs: np.ndarray) -> bool:
    """Whether points are ascending by (time, stream, position) already."""
    later = stamps[1:] > stamps[:-1]
    if bool(later.all()):
        return True
    same = stamps[1:] == stamps[:-1]
    if not bool((later | same).all()):
        return False
    after = (streams[1:] > streams[:-1]) | ((streams[1:] == streams[:-1]) & (seqs[1:] > seqs[:-1]))
    return bool((later | (same & after)).all())


def metric_samples(sql: Sql, key: MetricKey, start_ms: int, end_ms: int) -> list[Sample]:
    """A metric's datapoints in [start_ms, end_ms) as written, in time order (a job's
    non-finite points left out)."""
    found = series_id(sql, key)
    if found is None:
        return []
    samples: list[tuple[int, int, Sample]] = []
    for chunk in _chunks(sql, "series_id = ?", (found[0],), start_ms, end_ms):
        if chunk.kind == POINTS:
            stamps, values, _ = chunk.columns
            finite = np.isfinite(values)
            for index, (stamp, value) in enumerate(zip(stamps[finite].tolist(), values[finite].tolist(), strict=True)):
                samples.append((stamp, index, Sample(stamp, 1.0, value, value, value, value, "None")))
        else:
            stamps, values, counts, sums, lows, highs = (column.tolist() for column in chunk.columns)
            for index, row in enumerate(zip(stamps, counts, sums, lows, highs, values, strict=True)):
                stamp, count, total, low, high, value = row
                samples.append((stamp, index, Sample(stamp, count, total, low, high,
                                                     None if value != value else value, chunk.unit)))
    samples.sort(key=lambda item: item[0])
    return [sample for _, _, sample in samples]


def metric_columns(sql: Sql, key: MetricKey, start_ms: int, end_ms: int) -> dict[str, Columns]:
    """A metric's datapoints in [start_ms, end_ms) as written, as columns per unit sorted by time
    (a job's non-finite points left out): what statistics over raw data are computed from."""
    found = series_id(sql, key)
    return {} if found is None else _raw_columns(sql, found[0], start_ms, end_ms)


def _raw_columns(sql: Sql, series: int, start_ms: int, end_ms: int) -> dict[str, Columns]:
    columns: dict[str, list[Columns]] = {}
    for chunk in _chunks(sql, "series_id = ?", (series,), start_ms, end_ms):
        if chunk.kind == POINTS:
            stamps, values, _ = chunk.columns
            finite = np.isfinite(values)
            stamps, values = stamps[finite], values[finite]
            part = Columns(stamps, np.ones(len(stamps)), values, values, values, values)
        else:
            stamps, values, counts, sums, lows, highs = chunk.columns
            part = Columns(stamps, counts, sums, lows, highs, values)
        columns.setdefault(chunk.unit, []).append(part)
    return {unit: concat_columns(parts) for unit, parts in columns.items()}


def _raw_rollups(sql: Sql, series: int, start_ms: int, end_ms: int) -> dict[str, Rollups]:
    """The raw datapoints in [start_ms, end_ms) as one roll-up row each, per unit."""
    return {unit: Rollups.from_samples(*data) for unit, data in _raw_columns(sql, series, start_ms, end_ms).items()}


def _read_rollups(sql: Sql, series: int, period: int, start_ms: int, end_ms: int,
                  unit: str | None = None, sketches: bool = True) -> dict[str, Rollups]:
    condition = "series_id = ? AND period = ? AND timestamp_ms >= ? AND timestamp_ms < ?"
    args: list[Any] = [series, period, start_ms, end_ms]
    if unit is not None:
        condition += " AND unit = ?"
        args.append(unit)
    sketch = "sketch" if sketches else "NULL"
    rows = sql.rows(f"SELECT unit, timestamp_ms, count, sum, minimum, maximum, {sketch} FROM rollups "
                    f"WHERE {condition} ORDER BY unit, timestamp_ms", args)
    found: dict[str, Rollups] = {}
    start = 0
    while start < len(rows):
        stop = start
        while stop < len(rows) and rows[stop][0] == rows[start][0]:
            stop += 1
        group = rows[start:stop]
        _, stamps, counts, sums, lows, highs, blobs = zip(*group, strict=True)
        found[rows[start][0]] = Rollups.from_stored(
            np.array(stamps, np.int64), np.array(counts, np.float64), np.array(sums, np.float64),
            np.array(lows, np.float64), np.array(highs, np.float64),
            [None if blob is None else bytes(blob) for blob in blobs],
        )
        start = stop
    return found


def metric_rollups(sql: Sql, key: MetricKey, start_ms: int, end_ms: int, period_s: int,
                   periods: Sequence[int], sketches: bool = True) -> dict[str, Rollups] | None:
    """The metric's data in [start_ms, end_ms) as roll-up rows per unit, when a tier serves the
    period (it divides the period and the start) and part of the range is rolled up; else None
    (the caller computes from the raw datapoints). Without ``sketches``, stored rows come
    without them (no percentiles), which saves decoding them."""
    found = series_id(sql, key)
    tier = max((p for p in periods if period_s % p == 0 and start_ms % (p * 1000) == 0), default=None)
    if found is None or tier is None or start_ms >= found[1]:
        return None
    series, rolled_ms = found
    cut = min(rolled_ms, end_ms // (tier * 1000) * tier * 1000)
    stored = _read_rollups(sql, series, tier, start_ms, cut, sketches=sketches)
    tail = {unit: rows.roll(0, tier * 1000) for unit, rows in _raw_rollups(sql, series, cut, end_ms).items()}
    return {unit: concat([stored.get(unit, Rollups.empty()), tail.get(unit, Rollups.empty())])
            for unit in sorted(set(stored) | set(tail))}


def convert_row_tables(sql: Sql) -> None:
    """Move the data of the first schema (a row per point in ``points``, per datapoint in
    ``datapoints``) into series and chunks; the migration drops the old tables afterwards."""
    for (job_id,) in sql.rows("SELECT DISTINCT job_id FROM points ORDER BY job_id"):
        rows = sql.rows("SELECT name, timestamp_ms, value, host, stream_id, seq FROM points WHERE job_id = ? "
                        "ORDER BY timestamp_ms, seq", (job_id,))
        write_points(sql, job_id, prepare_points([tuple(row) for row in rows]), ())
    for metric, namespace, name, dimensions in sql.rows("SELECT id, namespace, name, dimensions FROM metrics"):
        rows = sql.rows("SELECT resolution, timestamp_ms, count, sum, minimum, maximum, value, unit FROM datapoints "
                        "WHERE metric_id = ? ORDER BY timestamp_ms", (metric,))
        by_resolution: dict[int, list[Sample]] = {}
        for resolution, *fields in rows:
            by_resolution.setdefault(resolution, []).append(Sample(*fields))
        key = MetricKey.from_row(namespace, name, dimensions)
        put_samples(sql, prepare_samples([(key, resolution, samples) for resolution, samples in by_resolution.items()]),
                    ())


# -- maintenance ----------------------------------------------------------------------------


def maintain(transaction: Transaction, retention: Retention, now_ms: int) -> Maintenance:
    """Seal, roll up and expire what needs it, in short transactions (one per series to seal or
    roll up, one per EXPIRE_BATCH series to expire); nothing when another process holds the
    maintenance lease."""
    holder = f"{socket.gethostname()}:{os.getpid()}"
    with transaction() as sql:
        taken = sql.rows("UPDATE maintenance SET holder = ?, until_ms = ? WHERE id = 1 AND (until_ms < ? OR holder = ?) "
                         "RETURNING holder", (holder, now_ms + LEASE_MS, now_ms, holder))
    if not taken:
        return Maintenance(ran=False)
    done = Maintenance()
    try:
        # Only the series with something to do: a store of thousands of finished jobs costs a
        # few queries a minute, not thousands of transactions.
        with transaction() as sql:
            to_seal = [row[0] for row in sql.rows(
                "SELECT DISTINCT series_id FROM chunks WHERE sealed = 0 AND last_ms < ? ORDER BY series_id",
                (now_ms - SEAL_AFTER_MS,))]
        for series in to_seal:
            with transaction() as sql:
                _seal(sql, series, now_ms, done)
        with transaction() as sql:  # chunks sealed before overviews were: a batch a pass
            older = sql.rows("SELECT id, data FROM chunks WHERE kind = 0 AND sealed = 1 AND overview IS NULL "
                             f"AND count > {overview.BLOCK} ORDER BY id LIMIT {OVERVIEW_BACKFILL}")
            given = []
            for id_, data in older:
                try:
                    given.append((overview.of_points(codec.unpack(bytes(data))), id_))
                except Exception as exc:  # a chunk no one can read: the rest of the pass goes on
                    log.warning("chunk %s could not be read for its overview: %s", id_, exc)
            sql.many("UPDATE chunks SET overview = ? WHERE id = ?", given)
            done.overviews = len(given)
        if retention.tiers:
            with transaction() as sql:
                to_roll = [row[0] for row in sql.rows(
                    "SELECT id FROM series WHERE rolled_ms < ? AND last_ms >= rolled_ms ORDER BY id",
                    (_mark(retention, now_ms),))]
            for series in to_roll:
                with transaction() as sql:
                    _roll(sql, series, retention, now_ms, done)
        if retention.raw_s is not None or any(kept is not None for _, kept in retention.tiers):
            with transaction() as sql:
                every = [row[0] for row in sql.rows("SELECT id FROM series ORDER BY id")]
            for first in range(0, len(every), EXPIRE_BATCH):
                with transaction() as sql:
                    for series in every[first:first + EXPIRE_BATCH]:
                        _expire(sql, series, retention, now_ms, done)
    finally:
        with transaction() as sql:
            sql.rows("UPDATE maintenance SET until_ms = 0 WHERE id = 1 AND holder = ?", (holder,))
    return done


def _seal(sql: Sql, series: int, now_ms: int, done: Maintenance) -> None:
    # Lock the series row first (SQLite's write lock already serializes): a second maintainer
    # (the lease ran out, or the same process) then reads the chunks after this one committed,
    # instead of deleting the same ones and inserting their points again.
    if not sql.rows("UPDATE series SET rolled_ms = rolled_ms WHERE id = ? RETURNING id", (series,)):
        return  # deleted with its job since the pass listed it
    rows = sql.rows(
        f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE series_id = ? AND ((sealed = 0 AND last_ms < ?) "
        "OR (sealed = 1 AND count < ?)) ORDER BY id",
        (series, now_ms - SEAL_AFTER_MS, SEAL_POINTS),
    )
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in rows:
        groups.setdefault((row[1], row[2], row[3], row[4], row[5]), []).append(row)
    for (kind, host, stream, unit, resolution), group in groups.items():
        if all(row[6] for row in group):
            continue  # nothing new to seal
        parts = [codec.unpack(bytes(row[7])) for row in group]
        columns = [np.concatenate([part[i] for part in parts]) for i in range(len(parts[0]))]
        ids = [row[0] for row in group]
        for first in range(0, len(ids), 1000):  # under every driver's limit of parameters
            part = ids[first:first + 1000]
            sql.rows(f"DELETE FROM chunks WHERE id IN ({','.join('?' * len(part))})", part)
        new = [(series, kind, host, stream, unit, resolution, first_ms, last_ms, rows, 1, blob, summary)
               for first_ms, last_ms, rows, blob, summary in _sealed_pieces(kind, columns)]
        sql.many(_INSERT_CHUNK, new)
        done.sealed_chunks += len(new)
        done.sealed_points += len(columns[0])


def _mark(retention: Retention, now_ms: int) -> int:
    """Where roll-ups end after this pass: the last whole coarsest period that ended ROLL_LAG_MS ago."""
    coarsest = retention.periods[-1] * 1000
    return (now_ms - ROLL_LAG_MS) // coarsest * coarsest


def _roll(sql: Sql, series: int, retention: Retention, now_ms: int, done: Maintenance) -> None:
    mark = _mark(retention, now_ms)
    found = sql.rows("SELECT rolled_ms FROM series WHERE id = ?", (series,))
    if not found or mark <= found[0][0]:
        return  # deleted with its job since the pass listed it, or rolled up to the mark
    low = found[0][0]
    # Move the mark before reading: a writer of older data waits for this transaction, then
    # merges into the roll-ups; one that wrote before has committed when the update returns.
    sql.rows("UPDATE series SET rolled_ms = ? WHERE id = ?", (mark, series))
    raw = _raw_rollups(sql, series, low, mark)
    for unit, rows in raw.items():
        finer = rows
        for period in retention.periods:
            finer = finer.roll(0, period * 1000)
            sql.rows("DELETE FROM rollups WHERE series_id = ? AND period = ? AND unit = ? AND timestamp_ms >= ? "
                     "AND timestamp_ms < ?", (series, period, unit, low, mark))
            _insert_rollups(sql, series, period, unit, finer)
            done.rollup_rows += len(finer)
    done.rolled_series += bool(raw)


def _expire(sql: Sql, series: int, retention: Retention, now_ms: int, done: Maintenance) -> None:
    if retention.raw_s is not None:
        found = sql.rows("SELECT rolled_ms FROM series WHERE id = ?", (series,))
        if not found:
            return  # deleted with its job since the pass listed it
        cutoff = min(now_ms - retention.raw_s * 1000, found[0][0] if retention.tiers else now_ms)
        expired = sql.rows("DELETE FROM chunks WHERE series_id = ? AND kind = ? AND last_ms < ? RETURNING 1",
                           (series, SAMPLES, cutoff))
        done.expired_chunks += len(expired)
    for period, kept in retention.tiers:
        if kept is not None:
            expired = sql.rows("DELETE FROM rollups WHERE series_id = ? AND period = ? AND timestamp_ms < ? "
                               "RETURNING 1", (series, period, now_ms - kept * 1000))
            done.expired_rollups += len(expired)
