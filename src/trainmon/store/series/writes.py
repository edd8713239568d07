"""Writes of metric series: a job's points and PutMetricData's datapoints, as packed chunks, each
write merged into the roll-ups of the periods it falls in (the package's docstring tells the model)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...cloudwatch.datapoints import Datapoints, Metric
from ...cloudwatch.model import MetricKey, job_metric_key
from ...cloudwatch.sketch import Rollups, join
from ...cloudwatch.statistics import Columns, Sample
from .. import codec
from ..rows import PointBlock, PointTuple
from ..sql import Sql
from . import overview, tiers

NO_INTS = np.empty(0, np.int64)
POINTS, SAMPLES = 0, 1  # chunk kinds: a job's log points; PutMetricData's datapoints
SEAL_POINTS = 8192
SEAL_ON_WRITE_ROWS = 128  # a write this big is stored sealed at once: the file never holds its packed form
# series.rolled_ms of a series whose every write is merged into its roll-ups as it is stored: PutMetricData's
# (with roll-up tiers; without, 0, for maintenance to roll up should tiers be set later). A job's points are
# rolled up by maintenance, whole minutes once they end, and a write merges only what is older.
ROLLED_ALL = 2**62


def digest(key: MetricKey) -> bytes:
    return hashlib.sha256(f"{key.namespace}\0{key.name}\0{key.dimensions_json}".encode()).digest()


_UPSERT_SERIES = """
INSERT INTO series (namespace, name, dimensions, digest, job_id, last_ms, points, minimum, maximum,
                    final_value, final_ms, rolled_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
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
"""  # {greatest}: the backend's (Sql.greatest); rolled_ms: a new series' (see ROLLED_ALL)
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


Tiers = Callable[[Sql], Sequence[int]]
"""The periods a write merges into (``tiers.written``, from the store's record), asked (again)
after the write has locked its series' rows: a pass changing them waits for it, or has changed them."""


def write_points(sql: Sql, job_id: int, summaries: dict[str, _Summary], periods: Tiers) -> None:
    """Store what ``prepare_points`` made of a batch."""
    found = sql.rows("SELECT name FROM jobs WHERE id = ?", (job_id,))
    if not found:
        return  # the job was deleted while its last records were being stored
    job = found[0][0]
    chunk_rows: list[tuple[Any, ...]] = []
    ids: dict[str, int] = {}
    keys = {name: job_metric_key(job, name) for name in summaries}
    digests = {name: digest(key) for name, key in keys.items()}
    rolled: list[Written] = []
    for name, summary in sorted(summaries.items(), key=lambda item: digests[item[0]]):  # one lock order
        key = keys[name]
        last = max(int(c[2].max()) for c in summary.chunks)
        final_ms, final_value = summary.final or (None, None)
        series_id, rolled_ms = sql.rows(_UPSERT.format(greatest=sql.greatest), (
            key.namespace, key.name, key.dimensions_json, digests[name], job_id, last, summary.points,
            summary.minimum, summary.maximum, final_value, final_ms, 0,  # (maintenance rolls a job's points up)
        ))[0]
        ids[name] = series_id
        for _, _, stamps, values, _, _ in summary.chunks:
            if stamps.min() < rolled_ms:  # (a job's points are late only where maintenance rolled up already)
                kept = (stamps < rolled_ms) & np.isfinite(values)
                v = values[kept]
                rolled.append((series_id, "None", Columns(stamps[kept], np.ones(len(v)), v, v, v, v)))
    if rolled:
        roll_up(sql, rolled, periods(sql))
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


def put_samples(sql: Sql, prepared: PreparedSamples, periods: Tiers) -> None:
    """A PutMetricData call's datapoints, as ``prepare_samples`` made them: the series upserted in
    one statement, looked up in another, their chunks inserted in a third, however many metrics
    the call holds."""
    chunk_rows: list[tuple[Any, ...]] = []
    upserts: dict[bytes, tuple[Any, ...]] = {}
    fresh_rolled_ms = ROLLED_ALL if periods(sql) else 0  # a new series' (maintenance rolls it up without tiers)
    for key, key_digest, _, units in prepared:  # several resolutions (or items) of one metric: one row
        last = max(int(columns[0].max()) for _, columns, _ in units)
        previous = upserts.get(key_digest)
        if previous is None or previous[5] < last:
            upserts[key_digest] = (key.namespace, key.name, key.dimensions_json, key_digest, None, last, 0, None, None,
                                   None, None, fresh_rolled_ms)
    sql.many(_UPSERT_SERIES.format(greatest=sql.greatest), upserts.values())
    found = _series_ids(sql, list(upserts))
    rolled: list[Written] = []
    for _, key_digest, resolution, units in prepared:
        series_id, rolled_ms = found[key_digest]
        for unit, columns, encoded in units:
            chunk_rows.extend((series_id, SAMPLES, "", 0, unit, resolution, first, last_ms, rows, sealed, blob, summary)
                              for first, last_ms, rows, sealed, blob, summary in encoded)
            stamp, value, count, total, low, high = columns
            if stamp.max() >= rolled_ms:  # a series maintenance has yet to roll up: only what is older
                kept = stamp < rolled_ms
                stamp, value, count, total, low, high = (column[kept] for column in columns)
            rolled.append((series_id, unit, Columns(stamp, count, total, low, high, value)))
    roll_up(sql, rolled, periods(sql))
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


Written = tuple[int, str, Columns]
"""Datapoints a write rolls up: (series id, unit, the datapoints in any order)."""

_UPSERT_ROLLUPS = (
    "INSERT INTO rollups (series_id, period, timestamp_ms, unit, count, sum, minimum, maximum, sketch) "
    "VALUES {rows} ON CONFLICT (series_id, period, timestamp_ms, unit) DO UPDATE SET "
    "count = excluded.count, sum = excluded.sum, minimum = excluded.minimum, maximum = excluded.maximum, "
    "sketch = excluded.sketch"
)
_STORED_ROLLUPS = (
    "SELECT r.series_id, r.period, r.timestamp_ms, r.unit, r.count, r.sum, r.minimum, r.maximum, r.sketch "
    "FROM (VALUES {rows}) AS k JOIN rollups r ON r.series_id = k.column1 AND r.period = k.column2 "
    "AND r.timestamp_ms = k.column3 AND r.unit = k.column4"
)
_SLICE = 128  # roll-up rows a statement (1,152 parameters at most, under every driver's limit)


def roll_up(sql: Sql, written: list[Written], periods: Sequence[int]) -> None:
    """Merge a write's datapoints into the roll-up rows of every tier, in the write's transaction,
    so that the roll-ups hold what is stored and reads take their statistics from them, maintained
    or not. The whole write at once, whatever the number of series: each tier rolled up from a
    finer one (:func:`tiers.chain`) for all of them in a few vectorized operations, the
    stored rows of those periods read by key, merged, and written back, many rows a statement.
    Every write of a series first upserts its row of ``series``, which holds it to the
    transaction's end, so two writers of one series merge in turn, never over each other."""
    written = [part for part in written if len(part[2].timestamp_ms)]
    if not periods or not written:
        return
    targets = list(dict.fromkeys((series, unit) for series, unit, _ in written))  # (series, unit) of each group
    code = {target: number for number, target in enumerate(targets)}
    written.sort(key=lambda part: code[part[0], part[1]])  # (stable) each group's datapoints together
    groups = np.repeat(np.array([code[series, unit] for series, unit, _ in written], np.int64),
                       [len(columns.timestamp_ms) for _, _, columns in written])
    columns = _joined([columns for _, _, columns in written])
    stamps = columns[0]
    if not bool(((stamps[1:] >= stamps[:-1]) | (groups[1:] != groups[:-1])).all()):
        order = np.lexsort((stamps, groups))
        columns, groups = [column[order] for column in columns], groups[order]
    base, steps = tiers.chain(periods)
    rolled: dict[int, tuple[Rollups, np.ndarray]] = {base: Rollups.rolled_samples(groups, base * 1000, *columns)}
    for period, source in steps:
        rolled[period] = rolled[source][0].roll_groups(rolled[source][1], period * 1000)
    rows_of: list[Rollups] = []
    keys: list[tuple[int, int, int, str]] = []
    for period in sorted(periods):
        rows, groups = rolled[period]
        rows_of.append(rows)
        keys.extend((targets[group][0], period, stamp, targets[group][1])
                    for group, stamp in zip(groups.tolist(), rows.timestamp_ms.tolist(), strict=True))
    _merge_stored(sql, keys, join(rows_of))  # every tier's rows together, merged and encoded at once


def merge_rollups(sql: Sql, series_id: int, period: int, unit: str, rows: Rollups) -> None:
    """Roll-up rows merged into those stored for the same periods (as they are where none is)."""
    _merge_stored(sql, [(series_id, period, stamp, unit) for stamp in rows.timestamp_ms.tolist()], rows)


def _merge_stored(sql: Sql, keys: list[tuple[int, int, int, str]], fresh: Rollups) -> None:
    """The rows ``fresh`` (of ``keys``, row for row) merged into the stored rows of those keys."""
    merged = _stored_rollups(sql, keys, fresh.timestamp_ms).merge(fresh)
    rolled = [(*key, *row) for key, row in zip(keys, zip(
        merged.count.tolist(), merged.sum.tolist(), merged.minimum.tolist(), merged.maximum.tolist(),
        merged.sketches(), strict=True), strict=True)]
    for part in _slices(rolled):
        sql.rows(_UPSERT_ROLLUPS.format(rows=", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(part))),
                 [value for row in part for value in row])


def _slices(rows: list[Any]) -> Iterator[list[Any]]:
    """``rows`` in slices of _SLICE, the rest in slices of powers of two: a statement of many rows
    costs the database (and PostgreSQL's driver) much less than as many statements of one, and
    statements of a few sizes only are each parsed once."""
    first, size = 0, _SLICE
    while first < len(rows):
        while size > len(rows) - first:
            size //= 2
        yield rows[first:first + size]
        first += size


def _joined(parts: list[Columns]) -> list[np.ndarray]:
    """The columns of ``parts`` one after the other. A column that is another one in every part (a
    single value is its own sum, minimum and maximum) is joined once: copying 50,000 datapoints'
    columns costs more than rolling them up."""
    joined: list[np.ndarray] = []
    for index in range(len(parts[0])):
        same = next((earlier for earlier in range(index) if all(part[index] is part[earlier] for part in parts)), None)
        joined.append(joined[same] if same is not None else np.concatenate([part[index] for part in parts]))
    return joined


def _stored_rollups(sql: Sql, keys: list[tuple[int, int, int, str]], stamps: np.ndarray) -> Rollups:
    """The stored roll-up rows of ``keys`` (series id, period, start, unit), row for row: empty where
    none is stored yet. Looked up by key, a slice of keys a query."""
    found: list[tuple[Any, ...]] = []
    for part in _slices(keys):
        found.extend(sql.rows(_STORED_ROLLUPS.format(rows=", ".join(["(?, ?, ?, ?)"] * len(part))),
                              [value for key in part for value in key]))
    if not found:
        return Rollups.placed(Rollups.empty(), np.zeros(0, np.int64), stamps)
    index = {key: number for number, key in enumerate(keys)}
    found.sort(key=lambda row: index[row[:4]])
    _, _, _, _, counts, sums, lows, highs, blobs = zip(*found, strict=True)
    rows = Rollups.from_stored(np.array([row[2] for row in found], np.int64), np.array(counts, np.float64),
                               np.array(sums, np.float64), np.array(lows, np.float64), np.array(highs, np.float64),
                               [None if blob is None else bytes(blob) for blob in blobs])
    return Rollups.placed(rows, np.array([index[row[:4]] for row in found], np.int64), stamps)


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
