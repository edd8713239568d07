"""Maintenance of metric series: chunks sealed, whole periods of the series whose writes leave the
roll-ups to it (a job's points) rolled up into every tier, data past its retention expired, one
short transaction per series and step, under a lease."""

from __future__ import annotations

import logging
import math
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...cloudwatch.model import MetricKey
from ...cloudwatch.retention import Retention, periods_text
from ...cloudwatch.statistics import Sample
from .. import codec
from ..rows import Maintenance
from ..sql import Sql, Transaction
from . import overview, tiers
from .reads import raw_rollups
from .writes import (
    CHUNK_COLUMNS,
    INSERT_CHUNK,
    POINTS,
    ROLLED_ALL,
    SAMPLES,
    SEAL_POINTS,
    insert_rollups,
    merge_rollups,
    prepare_points,
    prepare_samples,
    put_samples,
    read_rollups,
    sealed_pieces,
    write_points,
)

log = logging.getLogger(__name__)
SEAL_AFTER_MS = 60_000
BUSY_CHUNKS = 32  # unsealed chunks that make a series busy: sealed within seconds (seal_busy)
ROLL_LAG_MS = 60_000  # roll a period up this long after it ends, when late writes have landed
LEASE_MS = 600_000
EXPIRE_BATCH = 200  # series expired per transaction (index seeks each; writers wait a few ms at most)
DROP_SERIES = 200  # series whose left-out roll-ups a transaction drops once a retier is recorded
REBUILD_SOURCE_ROWS = 10_000  # a tier rebuilt from a finer one (trainmon maintain): this many of its rows a transaction
OVERVIEW_BACKFILL = 256  # chunks sealed before overviews existed given one a pass (about 0.2 s)


def convert_row_tables(sql: Sql) -> None:
    """Move the data of the first schema (a row per point in ``points``, per datapoint in
    ``datapoints``) into series and chunks; the migration drops the old tables afterwards."""
    for (job_id,) in sql.rows("SELECT DISTINCT job_id FROM points ORDER BY job_id"):
        rows = sql.rows("SELECT name, timestamp_ms, value, host, stream_id, seq FROM points WHERE job_id = ? "
                        "ORDER BY timestamp_ms, seq", (job_id,))
        write_points(sql, job_id, prepare_points([tuple(row) for row in rows]), lambda _: ())
    for metric, namespace, name, dimensions in sql.rows("SELECT id, namespace, name, dimensions FROM metrics"):
        rows = sql.rows("SELECT resolution, timestamp_ms, count, sum, minimum, maximum, value, unit FROM datapoints "
                        "WHERE metric_id = ? ORDER BY timestamp_ms", (metric,))
        by_resolution: dict[int, list[Sample]] = {}
        for resolution, *fields in rows:
            by_resolution.setdefault(resolution, []).append(Sample(*fields))
        key = MetricKey.from_row(namespace, name, dimensions)
        put_samples(sql, prepare_samples([(key, resolution, samples) for resolution, samples in by_resolution.items()]),
                    lambda _: ())


# -- maintenance ----------------------------------------------------------------------------


def maintain(transaction: Transaction, retention: Retention, now_ms: int, *, retier: bool = False) -> Maintenance:
    """Seal, roll up and expire what needs it, in short transactions (one per series to seal or
    roll up, one per EXPIRE_BATCH series to expire); nothing when another process holds the
    maintenance lease. Roll-ups go into the tiers the store records (:mod:`.tiers`); with
    ``retier`` (``trainmon maintain``: a person's choice, never a background pass's, as processes
    may run with other policies) the store's tiers become this policy's first."""
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
                _seal(sql, series, now_ms - SEAL_AFTER_MS, done)
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
        if retier:
            _retier(transaction, retention.periods, done)
        with transaction() as sql:
            complete, building = tiers.settled(sql, retention.periods)
        periods = tiers.merged(complete, building)  # (what writers merge into too)
        if periods:
            mark = _mark(periods, now_ms)
            with transaction() as sql:
                to_roll = [row[0] for row in sql.rows(
                    "SELECT id FROM series WHERE rolled_ms < ? AND last_ms >= rolled_ms ORDER BY id", (mark,))]
            for series in to_roll:
                with transaction() as sql:
                    _roll(sql, series, periods, mark, done)
        kept = [(period, kept_s) for period, kept_s in retention.tiers if period in complete]
        if retention.raw_s is not None or any(kept_s is not None for _, kept_s in kept):
            with transaction() as sql:
                every = [row[0] for row in sql.rows("SELECT id FROM series ORDER BY id")]
            for first in range(0, len(every), EXPIRE_BATCH):
                with transaction() as sql:
                    for series in every[first:first + EXPIRE_BATCH]:
                        _expire(sql, series, retention.raw_s, kept, bool(periods), now_ms, done)
    finally:
        with transaction() as sql:
            sql.rows("UPDATE maintenance SET until_ms = 0 WHERE id = 1 AND holder = ?", (holder,))
    return done


def seal_busy(transaction: Transaction, read: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]) -> Maintenance:
    """Seal now, whatever their age, the chunks of the series that writes keep busy (BUSY_CHUNKS
    unsealed ones or more), without waiting for the minute's pass: a running job's recent points
    are a chunk a write, ten a second or more, and every read of them pays per chunk. A job's
    points only: PutMetricData's are read from their roll-ups, and a write of them tried again
    (its reply lost) looks for its first chunk as written, which sealing would have replaced. No
    lease: sealing a series locks its row first, so two processes at it seal it in turn, and the
    second finds too few left to bother."""
    done = Maintenance()
    busy = read("SELECT series_id FROM chunks WHERE sealed = 0 AND kind = ? GROUP BY series_id HAVING count(*) >= ? "
                "ORDER BY series_id", (POINTS, BUSY_CHUNKS))
    for (series,) in busy:
        with transaction() as sql:
            _seal(sql, series, ROLLED_ALL, done, least=BUSY_CHUNKS, kind=POINTS)
    return done


def _seal(sql: Sql, series: int, before_ms: int, done: Maintenance, least: int = 1, kind: int | None = None) -> None:
    """Seal the series' unsealed chunks that end before ``before_ms`` with its sealed chunks that
    have room (of one ``kind``, if given), if there are ``least`` unsealed ones at least."""
    # Lock the series row first: a second sealer then reads the chunks after this one committed,
    # instead of deleting the same ones and inserting their points again.
    if _locked(sql, series) is None:
        return  # deleted with its job since the pass listed it
    of_kind = "" if kind is None else f" AND kind = {int(kind)}"
    rows = sql.rows(
        f"SELECT {CHUNK_COLUMNS} FROM chunks WHERE series_id = ?{of_kind} AND ((sealed = 0 AND last_ms < ?) "
        "OR (sealed = 1 AND count < ?)) ORDER BY id",
        (series, before_ms, SEAL_POINTS),
    )
    if sum(not row[6] for row in rows) < least:
        return
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
               for first_ms, last_ms, rows, blob, summary in sealed_pieces(kind, columns)]
        sql.many(INSERT_CHUNK, new)
        done.sealed_chunks += len(new)
        done.sealed_points += len(columns[0])


def _locked(sql: Sql, series: int) -> int | None:
    """Lock a series' row to the transaction's end (SQLite's write lock already serializes): its
    ``rolled_ms``, or None for a series deleted (with its job) since a pass listed it. Writers of
    the series wait meanwhile, as they upsert the row first."""
    found = sql.rows("UPDATE series SET rolled_ms = rolled_ms WHERE id = ? RETURNING rolled_ms", (series,))
    return found[0][0] if found else None


def _retier(transaction: Transaction, target: tuple[int, ...], done: Maintenance) -> None:
    """Bring the store's roll-ups to the ``target`` periods (this process's policy's) where it
    records others (:mod:`.tiers` tells how)."""
    with transaction() as sql:
        complete, building = tiers.recorded(sql)
        if complete is None or (complete == target and building is None):
            return  # (a store without a record takes this policy's as it is)
        log.info("the store's roll-up tiers change from %s to %s", periods_text(complete), periods_text(target))
        sql.rows("UPDATE maintenance SET building = ? WHERE id = 1", (tiers.text(target),))
    with transaction() as sql:
        if sql.series_writes_wait:  # a writer that read the record before the target was named has committed
            sql.rows(sql.series_writes_wait)
        every = [row[0] for row in sql.rows("SELECT id FROM series ORDER BY id")]
    for series in every:
        done.retiered_rows += _rebuild(transaction, series, complete, target)
    with transaction() as sql:
        if sql.series_writes_wait:  # no writer is left that merges into the periods the target drops
            sql.rows(sql.series_writes_wait)
        recorded = sql.rows("UPDATE maintenance SET periods = ?, building = NULL WHERE id = 1 AND building = ? "
                            "RETURNING 1", (tiers.text(target), tiers.text(target)))
        now_every = [row[0] for row in sql.rows("SELECT id FROM series ORDER BY id")] if recorded else []
    if recorded:  # the rows of the periods left out (a writer's too, made after its series was rebuilt), no
        # longer read or written: dropped a few series a transaction, through the key, with no writer waiting
        left_out = f" AND period NOT IN ({','.join('?' * len(target))})" if target else ""
        for at in range(0, len(now_every), DROP_SERIES):  # (series made during the pass too)
            batch = now_every[at:at + DROP_SERIES]
            with transaction() as sql:
                sql.rows(f"DELETE FROM rollups WHERE series_id IN ({','.join('?' * len(batch))}){left_out}",
                         (*batch, *target))
    done.retiered_series, done.tiers_before = len(every), complete


def _rebuild(transaction: Transaction, series: int, complete: tuple[int, ...], target: tuple[int, ...]) -> int:
    """One series' roll-ups in the ``target`` periods, from those in the ``complete`` ones: each period
    added from the coarsest complete one that divides it, or from the datapoints before the series'
    ``rolled_ms`` where none does (a period this rebuild added first counts as complete for the coarser
    ones: each source is read once). A slice of time (REBUILD_SOURCE_ROWS of the source's periods, whole
    periods of the new one) a transaction under the series' lock, so writers wait milliseconds, however
    long the series: what they write meanwhile goes into the target's periods too, so a slice built
    before it holds it, and one built after reads it from the source. The number of rows written."""
    written = 0
    built = list(complete)
    for period in target:  # (finest first)
        if period in complete:
            continue
        source = tiers.coarsest_divisor(period, built)
        built.append(period)
        span_ms = -(-(source or 60) * REBUILD_SOURCE_ROWS // period) * period * 1000  # (whole periods)
        start_ms: int | None = -ROLLED_ALL
        while start_ms is not None:
            with transaction() as sql:
                rolled_ms = _locked(sql, series)
                if rolled_ms is None:
                    return written  # deleted with its job since the pass listed it
                first_ms = _next_source_ms(sql, series, source, start_ms, rolled_ms)
                if first_ms is None:  # nothing left to build from: the rest of the period's rows go
                    sql.rows("DELETE FROM rollups WHERE series_id = ? AND period = ? AND timestamp_ms >= ?",
                             (series, period, start_ms))
                    break
                low = first_ms // (period * 1000) * period * 1000
                high = low + span_ms
                sql.rows("DELETE FROM rollups WHERE series_id = ? AND period = ? AND timestamp_ms >= ? "
                         "AND timestamp_ms < ?", (series, period, start_ms, high))
                if source is not None:
                    finer = read_rollups(sql, series, source, low, high)
                    rows = {unit: stored.roll(0, period * 1000) for unit, stored in finer.items()}
                else:
                    rows = raw_rollups(sql, series, low, min(high, rolled_ms), period * 1000)
                for unit, rolled in rows.items():
                    insert_rollups(sql, series, period, unit, rolled)
                    written += len(rolled)
                start_ms = high
    return written


def _next_source_ms(sql: Sql, series: int, source: int | None, start_ms: int, rolled_ms: int) -> int | None:
    """The time of the series' first roll-up row of period ``source`` from ``start_ms`` on, or with
    no source, of its first datapoint before ``rolled_ms`` (what the roll-ups hold); None if none."""
    if source is not None:
        found = sql.rows("SELECT min(timestamp_ms) FROM rollups WHERE series_id = ? AND period = ? AND timestamp_ms >= ?",
                         (series, source, start_ms))
    else:
        found = sql.rows("SELECT min(first_ms) FROM chunks WHERE series_id = ? AND last_ms >= ? AND first_ms < ?",
                         (series, start_ms, rolled_ms))
        if found and found[0][0] is not None:
            return max(int(found[0][0]), start_ms)
    return None if not found or found[0][0] is None else int(found[0][0])


def _mark(periods: tuple[int, ...], now_ms: int) -> int:
    """Where roll-ups end after this pass: the last whole period of the finest tier (the tiers'
    greatest common divisor: a minute, for CloudWatch's) that ended ROLL_LAG_MS ago. A coarser
    period the mark falls in holds what lies before it, and the next pass merges the rest into its
    row (:func:`_roll`'s periods begun before its low), so a running job's statistics read the raw
    points of its last minute or two alone, where a mark at the coarsest period (an hour) left up
    to two hours of them (``benchmarks/store.py``, a running job's statistics)."""
    whole = math.gcd(*periods) * 1000
    return (now_ms - ROLL_LAG_MS) // whole * whole


def _roll(sql: Sql, series: int, periods: tuple[int, ...], mark: int, done: Maintenance) -> None:
    found = sql.rows("SELECT rolled_ms FROM series WHERE id = ?", (series,))
    if not found or mark <= found[0][0]:
        return  # deleted with its job since the pass listed it, or rolled up to the mark
    low = found[0][0]
    # Move the mark before reading: a writer of older data waits for this transaction, then
    # merges into the roll-ups; one that wrote before has committed when the update returns.
    sql.rows("UPDATE series SET rolled_ms = ? WHERE id = ?", (mark, series))
    base, steps = tiers.chain(periods)
    raw = raw_rollups(sql, series, low, mark, base * 1000)
    for unit, rows in raw.items():
        rolled = {base: rows}
        for period, source in steps:
            rolled[period] = rolled[source].roll(0, period * 1000)
        for period in periods:
            finer = rolled[period]
            sql.rows("DELETE FROM rollups WHERE series_id = ? AND period = ? AND unit = ? AND timestamp_ms >= ? "
                     "AND timestamp_ms < ?", (series, period, unit, low, mark))
            begun = finer.timestamp_ms < low  # a period begun before low: where the tiers changed since
            if begun.any():  # the last pass, and low is not a whole period of each; its row holds the rest
                merge_rollups(sql, series, period, unit, finer.select(begun))
                insert_rollups(sql, series, period, unit, finer.select(~begun))
            else:
                insert_rollups(sql, series, period, unit, finer)
            done.rollup_rows += len(finer)
    done.rolled_series += bool(raw)


def _expire(sql: Sql, series: int, raw_s: int | None, kept_tiers: list[tuple[int, int | None]], rolled: bool,
            now_ms: int, done: Maintenance) -> None:
    """Expire a series' raw datapoints older than ``raw_s`` (never those not rolled up yet, where
    the store has tiers: ``rolled``) and each tier's rows as ``kept_tiers`` say, once the series'
    mark has passed their period's end: a row the mark falls in, which the next pass merges the
    rest of its period into, is never expired half made (to be made again from that rest alone)."""
    found = sql.rows("SELECT rolled_ms FROM series WHERE id = ?", (series,))
    if not found:
        return  # deleted with its job since the pass listed it
    rolled_ms = int(found[0][0])
    if raw_s is not None:
        cutoff = min(now_ms - raw_s * 1000, rolled_ms if rolled else now_ms)
        expired = sql.rows("DELETE FROM chunks WHERE series_id = ? AND kind = ? AND last_ms < ? RETURNING 1",
                           (series, SAMPLES, cutoff))
        done.expired_chunks += len(expired)
    for period, kept in kept_tiers:
        if kept is not None:
            cutoff = min(now_ms - kept * 1000, rolled_ms - period * 1000 + 1)
            expired = sql.rows("DELETE FROM rollups WHERE series_id = ? AND period = ? AND timestamp_ms < ? "
                               "RETURNING 1", (series, period, cutoff))
            done.expired_rollups += len(expired)
