"""Reads of metric series: a job's points (whole, or kept for a chart), and CloudWatch metrics' samples,
columns and roll-ups."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Any

import numpy as np

from ...cloudwatch.model import MetricKey
from ...cloudwatch.sketch import Rollups, concat
from ...cloudwatch.statistics import Columns, Sample, concat_columns
from .. import codec
from ..rows import JobPoints, PointColumns, PointRow
from ..sql import Sql
from . import overview, tiers
from .writes import CHUNK_COLUMNS, NO_INTS, POINTS, digest, read_rollups

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
                end_ms: int | None, columns: str = CHUNK_COLUMNS) -> list[tuple[Any, ...]]:
    """The chunk rows that may hold points in the range, as stored (decoding them needs no lock)."""
    where, values = _in_range(condition, args, start_ms, end_ms)
    return sql.rows(f"SELECT {columns} FROM chunks WHERE {where} ORDER BY id", values)


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
        columns = codec.decoded(bytes(data))
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
        return JobPoints([], {}, NO_INTS, NO_INTS, NO_INTS, NO_INTS, np.empty(0))
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
        return sql.rows(f"SELECT {CHUNK_COLUMNS}, count, 0 FROM chunks WHERE {ranged} ORDER BY id", values)
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
    """Per unit, the datapoints in [start_ms, end_ms) of the chunks in their order. A running job's
    recent points are hundreds of small packed chunks (one per write), so each run of chunks of one
    kind and unit is decoded and joined first, then filtered once: the work per chunk is its
    unpacking alone, and the columns are those that filtering each chunk and joining them gives."""
    columns: dict[str, list[Columns]] = {}
    rows = _chunk_rows(sql, "series_id = ?", (series,), start_ms, end_ms, "kind, unit, data")  # (what is used:
    for (kind, unit), run in groupby(rows, key=itemgetter(0, 1)):  # hundreds of rows, a third of the time)
        joined = codec.decoded.joined([bytes(row[2]) for row in run])
        keep = (joined[0] >= start_ms) & (joined[0] < end_ms)
        if kind == POINTS:
            stamps, values, _ = joined
            keep &= np.isfinite(values)
            stamps, values = stamps[keep], values[keep]
            part = Columns(stamps, np.ones(len(stamps)), values, values, values, values)
        else:
            stamps, values, counts, sums, lows, highs = (column[keep] for column in joined)
            part = Columns(stamps, counts, sums, lows, highs, values)
        columns.setdefault(unit, []).append(part)
    return {unit: concat_columns(parts) for unit, parts in columns.items()}


def raw_rollups(sql: Sql, series: int, start_ms: int, end_ms: int, period_ms: int,
                sketches: bool = True) -> dict[str, Rollups]:
    """The raw datapoints in [start_ms, end_ms) rolled up into periods of ``period_ms``, per unit
    (with no row a datapoint on the way: a running job's last minutes, read at every request of
    its statistics, took twice as long so); without ``sketches``, rows without them."""
    rolled = {}
    for unit, data in _raw_columns(sql, series, start_ms, end_ms).items():
        zeros = np.zeros(len(data.timestamp_ms), np.int64)
        rolled[unit] = Rollups.rolled_samples(zeros, period_ms, *data, sketches=sketches)[0] \
            if len(zeros) else Rollups.empty()
    return rolled


def metric_data(sql: Sql, key: MetricKey, start_ms: int, end_ms: int, period_s: int, periods: Sequence[int],
                sketches: bool = True) -> tuple[dict[str, Rollups] | None, dict[str, Columns]]:
    """What a metric's statistics per period are computed from, the metric looked up once: its
    :func:`_rollups` where a tier serves the period (and no columns), else None and its datapoints as
    written (:func:`metric_columns`)."""
    found = series_id(sql, key)
    if found is None:
        return None, {}
    rollups = _rollups(sql, found, start_ms, end_ms, period_s, periods, sketches)
    return (rollups, {}) if rollups is not None else (None, _raw_columns(sql, found[0], start_ms, end_ms))


def _rollups(sql: Sql, found: tuple[int, int], start_ms: int, end_ms: int, period_s: int, periods: Sequence[int],
             sketches: bool) -> dict[str, Rollups] | None:
    """The data of the series ``found`` (its id and rolled_ms) in [start_ms, end_ms) as roll-up rows per
    unit, when a tier serves the period (it divides the period and the start) and part of the range
    is rolled up; else None (the caller computes from the raw datapoints). Without ``sketches``,
    stored rows come without them (no percentiles), which saves decoding them."""
    if start_ms >= found[1]:
        return None
    periods = tiers.readable(sql, periods)
    tier = max((p for p in periods if period_s % p == 0 and start_ms % (p * 1000) == 0), default=None)
    if tier is None:
        return None
    series, rolled_ms = found
    cut = min(rolled_ms, end_ms // (tier * 1000) * tier * 1000)
    stored = read_rollups(sql, series, tier, start_ms, cut, sketches=sketches)
    tail = raw_rollups(sql, series, cut, end_ms, tier * 1000, sketches)
    return {unit: concat([stored.get(unit, Rollups.empty()), tail.get(unit, Rollups.empty())])
            for unit in sorted(set(stored) | set(tail))}
