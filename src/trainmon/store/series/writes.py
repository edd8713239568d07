"""Writes of metric series: a job's points and PutMetricData's datapoints, as packed chunks, with
late writes merged into their roll-ups (the package's docstring tells the model)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...cloudwatch.datapoints import Datapoints, Metric
from ...cloudwatch.model import MetricKey, job_metric_key
from ...cloudwatch.sketch import Rollups, concat
from ...cloudwatch.statistics import Columns, Sample, concat_columns
from .. import codec
from ..rows import PointBlock, PointTuple
from ..sql import Sql
from . import overview

NO_INTS = np.empty(0, np.int64)
POINTS, SAMPLES = 0, 1  # chunk kinds: a job's log points; PutMetricData's datapoints
SEAL_POINTS = 8192
SEAL_ON_WRITE_ROWS = 128  # a write this big is stored sealed at once: the file never holds its packed form


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
INSERT_CHUNK = (
    "INSERT INTO chunks (series_id, kind, host, stream_id, unit, resolution, first_ms, last_ms, count, sealed, data, "
    "overview) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
CHUNK_COLUMNS = "id, kind, host, stream_id, unit, resolution, sealed, data, series_id"


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
            for first, last, count, blob, summary in sealed_pieces(kind, columns, partial_overviews=False)]


def sealed_pieces(kind: int, columns: list[np.ndarray], *, partial_overviews: bool = True,
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
    sql.many(INSERT_CHUNK, chunk_rows)


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
    """What ``put_samples`` writes of PutMetricData calls queued together (store.series.buffer): one
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
    sql.many(INSERT_CHUNK, chunk_rows)


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
        stored = read_rollups(sql, series_id, period, low, high, unit).get(unit, Rollups.empty())
        merged = concat([stored, fresh]).roll(0, period * 1000)
        sql.rows("DELETE FROM rollups WHERE series_id = ? AND period = ? AND unit = ? AND timestamp_ms >= ? "
                 "AND timestamp_ms < ?", (series_id, period, unit, low, high))
        insert_rollups(sql, series_id, period, unit, merged)
        finer = fresh


def insert_rollups(sql: Sql, series_id: int, period: int, unit: str, rolled: Rollups) -> None:
    sql.many(
        "INSERT INTO rollups (series_id, period, timestamp_ms, unit, count, sum, minimum, maximum, sketch) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        zip([series_id] * len(rolled), [period] * len(rolled), rolled.timestamp_ms.tolist(), [unit] * len(rolled),
            rolled.count.tolist(), rolled.sum.tolist(), rolled.minimum.tolist(), rolled.maximum.tolist(),
            rolled.sketches(), strict=True),
    )


def read_rollups(sql: Sql, series: int, period: int, start_ms: int, end_ms: int,
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
