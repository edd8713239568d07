"""The store contract's one implementation over SQL.

:class:`~trainmon.store.contract.Store` is what the rest of trainmon may call. :class:`SqlStore` implements it once, in SQL
with ``?`` placeholders that both databases run; :class:`~trainmon.store.sqlite.SqliteStore` and
:class:`~trainmon.store.postgres.PostgresStore` bring the connection, the schema and their few
differences (how a transaction starts, how log chunks are sent, the words of a driver's errors),
and pass one test suite (``tests/test_store.py``). Metric series (chunks, roll-ups, maintenance)
are in :mod:`trainmon.store.series`.

Rows mean the same in both backends: job documents are JSON text, log chunks are records joined
by "\\n", times are epoch seconds (jobs) or milliseconds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..clock import REAL_CLOCK, Clock
from ..cloudwatch.model import MetricKey
from ..cloudwatch.retention import Retention
from ..cloudwatch.statistics import Columns, Sample
from ..errors import ResourceInUse, ResourceNotFound
from ..jobs.document import JobDocument, SupervisorIdentity
from ..jobs.search import Search, properties
from . import search, tuning
from .codec import unpack_text
from .rows import (
    AlarmHistoryRow,
    AlarmRow,
    Batch,
    ChunkRow,
    EventRow,
    JobPoints,
    JobRow,
    Maintenance,
    PointColumns,
    PointRow,
    StreamRow,
)
from .series import buffer
from .series.buffer import SampleBuffer, WriteBehind, Writer
from .sql import Sql, T, Where, limit_clause, pages, prefix_end

if TYPE_CHECKING:
    from ..cloudwatch.datapoints import Datapoints
    from ..cloudwatch.sketch import Rollups
    from .series.writes import PreparedSamples

SEQ_END = 2**62  # above every record number
PackedChunk = tuple[int, int, int, int, bytes, int]  # a log chunk to insert: ChunkTuple's, its text packed, packing

JOB_COLUMNS = "id, name, status, creation_time, last_modified_time, doc, supervisor, stop_requested, diagnostics"
STREAM_COLUMNS = (
    "id, job_id, host, name, creation_ms, first_event_ms, last_event_ms, last_ingestion_ms, records, stored_bytes"
)
JOB_ORDERS = {"Name": "name", "CreationTime": "creation_time", "Status": "status"}  # ListTrainingJobs' SortBy
STREAM_ORDERS = {False: ("name",), True: ("coalesce(last_event_ms, 0)", "name")}  # by name; by last event


class SqlStore(tuning.TuningJobs):
    """The Store contract written once for both backends, in SQL with ``?`` placeholders.

    A backend supplies the connection and its dialect: ``_read`` (one query outside a
    transaction), ``_transaction`` (a write transaction), ``_snapshot`` (reads that see one
    state), ``_insert_chunks`` (its fastest way in for log chunks) and ``_find`` (its function
    for the position of a string in another). Metric series (chunks, roll-ups, maintenance) are
    :mod:`trainmon.store.series`, imported on first use, because it needs numpy, which commands
    that only look at jobs and logs should not pay for at start."""

    home: Path
    location: str
    database_url: str | None
    retention: Retention
    clock: Clock = REAL_CLOCK
    write_behind: WriteBehind = WriteBehind()  # how PutMetricData's datapoints are written (store.series.buffer)
    _buffer: SampleBuffer | None = None  # the buffer this object queued into, drained by close()
    _database_key: str | None = None
    _find: str  # SQLite's instr(haystack, needle), PostgreSQL's strpos
    _search_dialect: search.Dialect
    _lock_job = ""  # what locks the job row update_job reads (PostgreSQL: FOR NO KEY UPDATE); alarms' too
    _skip_locked = ""  # what lets claimers of due alarms pass rows another one holds (PostgreSQL)

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[Sql]:
        raise NotImplementedError

    def _snapshot(self) -> AbstractContextManager[Sql]:
        raise NotImplementedError

    def _reading(self, work: Callable[[Sql], T]) -> T:
        """``work`` in one snapshot (a backend whose connection can break runs it again on a new one)."""
        with self._snapshot() as sql:
            return work(sql)

    def _insert_chunks(self, sql: Sql, chunks: list[PackedChunk]) -> None:
        raise NotImplementedError

    def _unpacked(self, stream_id: int, count: int, text: str | bytes, packing: int) -> str:
        """A log chunk's text, as its row holds it, read back."""
        return unpack_text(text, packing)

    def _written_tiers(self, sql: Sql) -> tuple[int, ...]:
        """The roll-up periods a write merges into: the store's (store.series.tiers), this
        process's policy's where the store has none recorded yet."""
        from .series import tiers

        return tiers.written(sql, self.retention.periods)

    def _writer_factory(self) -> Callable[[], Writer]:
        """What opens another connection to this database, for the write-behind buffer's writes."""
        raise NotImplementedError

    def _close_connection(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        try:
            if self._buffer is not None:
                self._buffer.drain()
        finally:
            self._close_connection()

    @property
    def database_key(self) -> str:
        if self._database_key is None:
            self._database_key = self.database_url or os.path.realpath(self.location)
        return self._database_key

    # -- jobs

    def create_job(
        self, name: str, doc: JobDocument, creation_time: float, supervisor: SupervisorIdentity | None = None
    ) -> JobRow:
        with self._transaction() as sql:
            rows = sql.rows(
                "INSERT INTO jobs (name, status, creation_time, last_modified_time, doc, supervisor) "
                f"VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING RETURNING {JOB_COLUMNS}",
                (name, doc["TrainingJobStatus"], creation_time, creation_time, json.dumps(doc),
                 json.dumps(supervisor) if supervisor is not None else None),
            )
            if rows:
                search.write_properties(sql, rows[0][0], properties(doc))
        if not rows:
            raise job_name_in_use(doc)
        return job_from_row(rows[0])

    def get_job(self, name: str) -> JobRow | None:
        rows = self._read(f"SELECT {JOB_COLUMNS} FROM jobs WHERE name = ?", (name,))
        return job_from_row(rows[0]) if rows else None

    def supervisors(self, statuses: tuple[str, ...]) -> list[tuple[str, SupervisorIdentity | None]]:
        where = Where().any_of("status", statuses)
        return [(name, _identity(supervisor)) for name, supervisor in self._read(f"SELECT name, supervisor FROM jobs WHERE {where.sql}", where.args)]

    def jobs_named(self, names: Sequence[str]) -> list[JobRow]:
        """The jobs of these names that exist, in no particular order."""
        rows = [row for part in range(0, len(names), 500) for row in self._read(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE {Where().any_of('name', names[part:part + 500]).sql}",
            names[part:part + 500])]
        return [job_from_row(row) for row in rows]

    def list_jobs(
        self,
        *,
        status: str | None = None,
        name_contains: str | None = None,
        statuses: tuple[str, ...] | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        sort_by: str = "CreationTime",
        descending: bool = True,
        limit: int | None = None,
    ) -> list[JobRow]:
        where = self._job_filter(status, name_contains, created_after, created_before).any_of("status", statuses)
        return self._jobs(where, sort_by, descending, None, limit)

    def jobs_after(
        self,
        after: tuple[Any, ...] | None,
        limit: int,
        *,
        status: str | None = None,
        name_contains: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        sort_by: str = "CreationTime",
        descending: bool = True,
    ) -> list[JobRow]:
        """Up to ``limit`` jobs in :meth:`list_jobs`' order after ``after``: a range of the index on
        the order's columns (``jobs_by_*_in_order``), however many jobs come before it."""
        where = self._job_filter(status, name_contains, created_after, created_before)
        return self._jobs(where, sort_by, descending, after, limit)

    def _job_filter(self, status: str | None, name_contains: str | None, created_after: float | None,
                    created_before: float | None) -> Where:
        return (Where().add("status = ?", status or None)
                .add(f"{self._find}(lower(name), lower(?)) > 0", name_contains or None)
                .add("creation_time > ?", created_after).add("creation_time < ?", created_before))

    def _jobs(self, where: Where, sort_by: str, descending: bool, after: tuple[Any, ...] | None,
              limit: int | None) -> list[JobRow]:
        columns = (JOB_ORDERS.get(sort_by, "creation_time"), "id")
        rows = self._page(f"SELECT {JOB_COLUMNS} FROM jobs", where, columns, after, descending, limit)
        return [job_from_row(row) for row in rows]

    def update_job(self, name: str, mutate: Callable[[JobRow], None]) -> JobRow:
        """Read, change and write one job atomically; ``mutate`` edits the row in place."""
        with self._transaction() as sql:
            rows = sql.rows(f"SELECT {JOB_COLUMNS} FROM jobs WHERE name = ?{self._lock_job}", (name,))
            if not rows:
                raise ResourceNotFound.for_job(name)
            job = job_from_row(rows[0])
            before = properties(job.doc)
            mutate(job)
            job.status = job.doc["TrainingJobStatus"]
            sql.rows(
                "UPDATE jobs SET status = ?, last_modified_time = ?, doc = ?, supervisor = ?, stop_requested = ?, "
                "diagnostics = ? WHERE id = ?",
                (job.status, job.last_modified_time, json.dumps(job.doc),
                 json.dumps(job.supervisor) if job.supervisor is not None else None, job.stop_requested,
                 json.dumps(job.diagnostics), job.id),
            )
            search.write_properties(sql, job.id, properties(job.doc), before)
        return job

    def search_jobs(self, request: Search, offset: int, limit: int) -> tuple[list[JobRow], int]:
        """The jobs that match a Search, in its order, from ``offset`` (at most ``limit``), and how
        many match in all."""

        def read(sql: Sql) -> tuple[list[JobRow], int]:
            ids, total = search.search_jobs(sql, request, self._search_dialect, offset, limit)
            if not ids:
                return [], total
            rows = {row[0]: job_from_row(row) for row in sql.rows(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE id IN ({', '.join('?' * len(ids))})", ids)}
            return [rows[job_id] for job_id in ids if job_id in rows], total

        return self._reading(read)

    def delete_job(self, name: str) -> None:
        with self._transaction() as sql:
            self._deleting_job(sql, name)
            sql.rows("DELETE FROM jobs WHERE name = ?", (name,))

    def _deleting_job(self, sql: Sql, name: str) -> None:
        """What a backend keeps of a job beyond its rows, removed in the transaction that deletes them."""

    # -- log streams

    def add_stream(self, job_id: int, host: str, name: str, creation_ms: int) -> StreamRow:
        with self._transaction() as sql:
            rows = sql.rows("INSERT INTO log_streams (job_id, host, name, creation_ms) VALUES (?, ?, ?, ?) "
                            "RETURNING id", (job_id, host, name, creation_ms))
        return StreamRow(rows[0][0], job_id, host, name, creation_ms, None, None, None, 0, 0)

    def streams(self, job_id: int | None = None, *, prefix: str | None = None) -> list[StreamRow]:
        return self._streams(_stream_filter(prefix).add("job_id = ?", job_id), False, False, None, None)

    def streams_after(self, after: tuple[Any, ...] | None, limit: int, *, prefix: str | None = None,
                      by_last_event: bool = False, descending: bool = False) -> list[StreamRow]:
        """Up to ``limit`` streams after ``after``: a range of the index on names (a prefix's
        streams are a range of it too) or on last event times (``log_streams_by_last_event``)."""
        return self._streams(_stream_filter(prefix), by_last_event, descending, after, limit)

    def _streams(self, where: Where, by_last_event: bool, descending: bool, after: tuple[Any, ...] | None,
                 limit: int | None) -> list[StreamRow]:
        rows = self._page(f"SELECT {STREAM_COLUMNS} FROM log_streams", where, STREAM_ORDERS[by_last_event], after,
                          descending, limit)
        return [StreamRow(*row) for row in rows]

    def _page(self, select: str, where: Where, columns: Sequence[str], after: Sequence[Any] | None, descending: bool,
              limit: int | None) -> list[tuple[Any, ...]]:
        """The rows of ``select`` (SELECT ... FROM a table) that match ``where``, in the order of
        ``columns`` (together unique), after ``after`` (the last row of an earlier page's values of
        them), at most ``limit``. After a place, they are read as ranges of the index on ``columns``
        in one snapshot: first those tied with it on every column but the last, then on one column
        fewer, and so on (not one row-value comparison: in SQLite, one that holds the rowid or an
        expression bounds no range of an index)."""
        direction, beyond = (" DESC", "<") if descending else ("", ">")

        def order(by: Sequence[str]) -> str:
            return " ORDER BY " + ", ".join(column + direction for column in by)

        if after is None:
            return self._read(f"{select} WHERE {where.sql}{order(columns)}{limit_clause(limit)}", where.args)

        def read(sql: Sql) -> list[tuple[Any, ...]]:
            rows: list[tuple[Any, ...]] = []
            for tied in reversed(range(len(columns))):  # the rows tied with ``after`` on the most columns first
                bounds = [f"{column} = ?" for column in columns[:tied]] + [f"{columns[tied]} {beyond} ?"]
                rows += sql.rows(f"{select} WHERE {' AND '.join([*where.conditions, *bounds])}{order(columns[tied:])}"
                                 f"{limit_clause(None if limit is None else limit - len(rows))}",
                                 [*where.args, *after[:tied + 1]])
                if limit is not None and len(rows) >= limit:
                    break
            return rows

        return self._reading(read)

    def stream(self, name: str) -> StreamRow | None:
        rows = self._read(f"SELECT {STREAM_COLUMNS} FROM log_streams WHERE name = ?", (name,))
        return StreamRow(*rows[0]) if rows else None

    def events(
        self,
        stream_id: int,
        *,
        after_seq: int = -1,
        before_seq: int | None = None,
        start_ms: int | None = None,
        end_ms: int | None = None,
        limit: int = 10_000,
        newest_first: bool = False,
    ) -> list[EventRow]:
        """Records with ``after_seq < seq < before_seq`` and a time in [start_ms, end_ms): the
        first ``limit`` of them, or the last ``limit`` when ``newest_first``; in seq order."""
        upper = before_seq if before_seq is not None else SEQ_END
        found: list[EventRow] = []
        if newest_first:
            where = Where().add("stream_id = ?", stream_id).add("timestamp_ms >= ?", start_ms)
            where.add("timestamp_ms < ?", end_ms)
            cursor = upper
            for page in pages():
                rows = self._chunks(f"{where.sql} AND first_seq < ? ORDER BY first_seq DESC", (*where.args, cursor),
                                    page)
                found.extend(chunk_events(rows, stream_id, after_seq, upper, limit - len(found), backward=True))
                if len(found) >= limit or not rows or rows[-1][0] <= after_seq + 1:
                    break
                cursor = rows[-1][0]
            return found[::-1]
        for rows in self._forward_chunks(stream_id, after_seq, before_seq=upper, start_ms=start_ms, end_ms=end_ms):
            found.extend(chunk_events(rows, stream_id, after_seq, upper, limit - len(found)))
            if len(found) >= limit:
                break
        return found

    def log_text(self, stream_id: int, *, after_seq: int = -1, limit: int = 100_000) -> tuple[str, int]:
        """The records after ``after_seq`` as text, each followed by "\n": whole chunks until about
        ``limit`` records; and the number of the last record in it (``after_seq`` when none)."""
        pieces: list[str] = []
        records, last = 0, after_seq
        for rows in self._forward_chunks(stream_id, after_seq):
            for first, count, _, text in rows:
                skip = after_seq + 1 - first
                if skip >= count:
                    continue
                if skip > 0:
                    text = text.split("\n", skip)[skip]
                    count -= skip
                pieces.append(text)
                records += count
                last = first + (count + max(skip, 0)) - 1
            if records >= limit:
                break
        if pieces:
            pieces.append("")  # the last record's newline, without copying the text again
        return "\n".join(pieces), last

    def log_chunks(self, stream_id: int, *, after_seq: int = -1, start_ms: int | None = None,
                   end_ms: int | None = None) -> Iterator[ChunkRow]:
        for rows in self._forward_chunks(stream_id, after_seq, start_ms=start_ms, end_ms=end_ms):
            yield from rows

    def _forward_chunks(self, stream_id: int, after_seq: int, *, before_seq: int | None = None,
                        start_ms: int | None = None, end_ms: int | None = None) -> Iterator[list[ChunkRow]]:
        """A stream's log chunks in record order, a page of them at a time (:func:`~trainmon.store.sql.pages`): from the one
        holding record ``after_seq + 1`` (or the first at ``start_ms``, when later), those that start
        before ``before_seq`` and have a time in [start_ms, end_ms). A seek on the index, then a
        walk along it."""
        start_row = self._read(
            "SELECT first_seq FROM log_chunks WHERE stream_id = ? AND first_seq <= ? ORDER BY first_seq DESC LIMIT 1",
            (stream_id, after_seq + 1),
        )
        lowest = start_row[0][0] if start_row else 0
        if start_ms is not None:
            by_time = self._read(
                "SELECT min(first_seq) FROM log_chunks WHERE stream_id = ? AND timestamp_ms >= ?", (stream_id, start_ms)
            )
            if by_time[0][0] is None:
                return
            lowest = max(lowest, by_time[0][0])
        where = Where().add("stream_id = ?", stream_id).add("timestamp_ms >= ?", start_ms)
        where.add("timestamp_ms < ?", end_ms).add("first_seq < ?", before_seq)
        comparison = ">="
        for page in pages():
            rows = self._chunks(f"{where.sql} AND first_seq {comparison} ? ORDER BY first_seq", (*where.args, lowest),
                                page)
            if not rows:
                return
            yield rows
            lowest, comparison = rows[-1][0], ">"

    def _chunks(self, condition: str, args: Sequence[Any], rows: int) -> list[ChunkRow]:
        """Up to ``rows`` log chunks matching a WHERE ... ORDER BY condition, their text unpacked."""
        found = self._read(
            f"SELECT stream_id, first_seq, count, timestamp_ms, text, packing FROM log_chunks WHERE {condition} "
            f"LIMIT {rows}", args)
        return [(first, count, stamp, self._unpacked(stream_id, count, text, packing))
                for stream_id, first, count, stamp, text, packing in found]

    # -- ingestion

    def write_batch(self, batch: Batch) -> None:
        """Log chunks, points, stream counters and diagnostics of one step: all of it or nothing.
        Writing a batch again after an error that left its outcome unknown stores it once."""
        points = prepared_points(batch)  # before the transaction, so its lock is held less
        chunks = [(stream_id, first, count, stamp, *packed) for (stream_id, first, count, stamp, _), packed
                  in zip(batch.chunks, batch.pack().result(), strict=True)]
        earliest: dict[int, int] = {}  # a stream's first event is its batch's earliest record, not its last
        for stream_id, _, _, stamp, _ in batch.chunks:
            earliest[stream_id] = min(stamp, earliest.get(stream_id, stamp))
        with self._transaction() as sql:
            if _stored_already(sql, batch):
                return
            if chunks:
                self._insert_chunks(sql, chunks)
            if points is not None:
                from .series.writes import write_points

                write_points(sql, batch.job_id, points, self._written_tiers)
            sql.many(
                "UPDATE log_streams SET records = records + ?, stored_bytes = stored_bytes + ?, "
                "first_event_ms = coalesce(first_event_ms, ?), last_event_ms = ?, last_ingestion_ms = ? "
                "WHERE id = ?",
                [(records, stored_bytes, earliest.get(stream_id, last_ms), last_ms, last_ms, stream_id)
                 for stream_id, (records, stored_bytes, last_ms) in sorted(batch.stream_stats.items())],
            )
            if batch.diagnostics is not None:
                sql.rows("UPDATE jobs SET diagnostics = ? WHERE id = ?", (json.dumps(batch.diagnostics), batch.job_id))
            sql.many(
                "INSERT INTO spool_progress (stream_id, pipe, consumed, after_cr) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (stream_id, pipe) DO UPDATE SET consumed = excluded.consumed, after_cr = excluded.after_cr",
                [(stream_id, pipe, consumed, int(after_cr))
                 for (stream_id, pipe), (consumed, after_cr) in sorted(batch.spools.items())],
            )

    def spool_progress(self, stream_id: int) -> dict[str, tuple[int, bool]]:
        """Per pipe of a log stream: how far its spool was consumed, and whether just after a "\r"."""
        rows = self._read("SELECT pipe, consumed, after_cr FROM spool_progress WHERE stream_id = ?", (stream_id,))
        return {pipe: (consumed, bool(after_cr)) for pipe, consumed, after_cr in rows}

    # -- metrics

    def points(self, job_id: int, *, names: list[str] | None = None, host: str | None = None,
               start_ms: int | None = None, end_ms: int | None = None) -> list[PointRow]:
        from .series import reads

        return self._reading(lambda sql: reads.job_points(sql, job_id, names=names, host=host, start_ms=start_ms,
                                                           end_ms=end_ms))

    def job_point_columns(self, job_id: int, *, names: list[str] | None = None, host: str | None = None,
                          start_ms: int | None = None, end_ms: int | None = None) -> JobPoints:
        from .series import reads

        return self._reading(lambda sql: reads.job_point_columns(sql, job_id, names=names, host=host,
                                                                  start_ms=start_ms, end_ms=end_ms))

    def point_columns(self, job_id: int, name: str, *, host: str | None = None, start_ms: int | None = None,
                      end_ms: int | None = None) -> PointColumns:
        from .series import reads

        rows = self._reading(lambda sql: reads.point_rows(sql, job_id, name, host=host, start_ms=start_ms,
                                                           end_ms=end_ms))
        return reads.point_columns(rows, start_ms, end_ms)  # decoded outside the store's lock: reads overlap

    def chart_points(self, job_id: int, name: str, *, width: int, host: str | None = None,
                     start_ms: int | None = None, end_ms: int | None = None) -> tuple[PointColumns, int]:
        from .series import reads

        rows = self._reading(lambda sql: reads.chart_rows(sql, job_id, name, host=host, start_ms=start_ms,
                                                           end_ms=end_ms, width=width))
        return reads.chart_columns(rows, start_ms, end_ms)

    def metric_names(self, job_id: int) -> list[str]:
        return [row[0] for row in self._read(
            "SELECT name FROM series WHERE job_id = ? AND points > 0 ORDER BY name", (job_id,))]

    def final_metrics(self, job_id: int) -> list[tuple[str, float, int]]:
        """Per metric, the last finite value and its time: (name, value, timestamp_ms)."""
        return self.final_metrics_of([job_id]).get(job_id, [])

    def final_metrics_of(self, job_ids: Sequence[int]) -> dict[int, list[tuple[str, float, int]]]:
        """:meth:`final_metrics` of several jobs in one read (a page of a job list)."""
        found: dict[int, list[tuple[str, float, int]]] = {}
        for job_id, name, value, ts in self._series_of(job_ids, "final_value, final_ms", "final_ms IS NOT NULL"):
            found.setdefault(job_id, []).append((name, value, ts))
        return found

    def metric_ranges_of(self, job_ids: Sequence[int]) -> dict[int, dict[str, tuple[float | None, float | None]]]:
        found: dict[int, dict[str, tuple[float | None, float | None]]] = {}
        for job_id, name, low, high in self._series_of(job_ids, "minimum, maximum", "points > 0"):
            found.setdefault(job_id, {})[name] = (low, high)
        return found

    def _series_of(self, job_ids: Sequence[int], columns: str, condition: str) -> Iterator[tuple[Any, ...]]:
        """(job_id, name, *columns) of the metric series of several jobs that meet ``condition``, by
        job and name, a read per 500 jobs (within any engine's limit on parameters)."""
        ids = list(dict.fromkeys(job_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            yield from self._read(f"SELECT job_id, name, {columns} FROM series WHERE job_id IN "
                                  f"({', '.join('?' * len(chunk))}) AND {condition} ORDER BY job_id, name", chunk)

    def metric_summaries(self, job_id: int) -> dict[str, tuple[int, float | None, float | None]]:
        """Per metric: (points, minimum, maximum) with minimum and maximum over finite values."""
        rows = self._read("SELECT name, points, minimum, maximum FROM series WHERE job_id = ? AND points > 0",
                          (job_id,))
        return {name: (count, low, high) for name, count, low, high in rows}

    def put_samples(self, items: list[tuple[MetricKey, int, list[Sample]]]) -> None:
        """Store a whole PutMetricData call in one transaction: all of it or nothing."""
        from .series import writes

        prepared = writes.prepare_samples(items)  # before the transaction, so its lock is held less
        with self._transaction() as sql:
            writes.put_samples(sql, prepared, self._written_tiers)

    def queue_samples(self, datapoints: Datapoints) -> None:
        if self._buffer is None:
            identity = (self.retention, self.write_behind, self.clock)
            self._buffer = buffer.shared(self.database_key, identity, lambda: SampleBuffer(
                self._writer_factory(), self.write_behind, self.clock))
        self._buffer.add(datapoints)

    def flush_samples(self) -> None:
        for queued in buffer.of_database(self.database_key):
            queued.flush()

    def _flush_for_read(self) -> None:
        """Before a metric read: what this process queued for the database is stored first."""
        for queued in buffer.of_database(self.database_key):
            queued.flush_for_read()

    def put_prepared_samples(self, prepared: PreparedSamples, *, check_stored: bool) -> None:
        """The write-behind buffer's write (this object is its writer): ``prepared`` in one
        transaction; with ``check_stored``, not when an earlier try was committed after all."""
        from .series import writes

        with self._transaction() as sql:
            if not (check_stored and writes.datapoints_stored(sql, prepared)):
                writes.put_samples(sql, prepared, self._written_tiers)

    def metric_samples(self, key: MetricKey, start_ms: int, end_ms: int) -> list[Sample]:
        """Datapoints of one metric (exact dimension set) in [start_ms, end_ms), job points included."""
        from .series import reads

        self._flush_for_read()
        return self._reading(lambda sql: reads.metric_samples(sql, key, start_ms, end_ms))

    def metric_columns(self, key: MetricKey, start_ms: int, end_ms: int) -> dict[str, Columns]:
        from .series import reads

        self._flush_for_read()
        return self._reading(lambda sql: reads.metric_columns(sql, key, start_ms, end_ms))

    def metric_data(self, key: MetricKey, start_ms: int, end_ms: int, period_s: int,
                    sketches: bool = True) -> tuple[dict[str, Rollups] | None, dict[str, Columns]]:
        from .series import reads

        periods = self.retention.periods
        self._flush_for_read()
        return self._reading(lambda sql: reads.metric_data(sql, key, start_ms, end_ms, period_s, periods, sketches))

    def metric_keys(self, namespace: str | None = None, name: str | None = None) -> list[tuple[MetricKey, int]]:
        """Every metric with the time of its newest datapoint; jobs' metrics are in JOB_NAMESPACE."""
        self._flush_for_read()
        where = Where().add("namespace = ?", namespace).add("name = ?", name)
        rows = self._read(f"SELECT namespace, name, dimensions, last_ms FROM series WHERE {where.sql}", where.args)
        keys = [(MetricKey.from_row(ns, metric, dimensions), last) for ns, metric, dimensions, last in rows]
        return sorted(keys, key=lambda item: (item[0].namespace, item[0].name, item[0].dimensions))

    def metric_keys_after(self, after: tuple[str, str, int] | None, limit: int, namespace: str | None = None,
                          name: str | None = None) -> list[tuple[MetricKey, int, tuple[str, str, int]]]:
        """Up to ``limit`` metrics in the order of (namespace, name, id), after ``after``: each with
        the time of its newest datapoint and its place in that order, to go on from. A page costs
        the same however many metrics there are."""
        self._flush_for_read()
        where = Where().add("namespace = ?", namespace).add("name = ?", name)
        if after is not None:  # the columns not fixed above, so that the index's range starts at ``after``
            if namespace is not None and name is not None:
                where.add("id > ?", after[2])
            elif namespace is not None:
                where.add("(name, id) > (?, ?)", *after[1:])
            else:
                where.add("(namespace, name, id) > (?, ?, ?)", *after)
        rows = self._read(f"SELECT namespace, name, dimensions, last_ms, id FROM series WHERE {where.sql} "
                          "ORDER BY namespace, name, id LIMIT ?", [*where.args, limit])
        return [(MetricKey.from_row(ns, metric, dimensions), last, (ns, metric, id_))
                for ns, metric, dimensions, last, id_ in rows]

    def maintain(self, now_ms: int | None = None, *, retier: bool = False) -> Maintenance:
        from .series import upkeep

        self._flush_for_read()
        done = upkeep.maintain(self._transaction, self.retention,
                               now_ms if now_ms is not None else int(time.time() * 1000), retier=retier)
        if done.ran:
            self._release_space(done)
        return done

    def seal_busy(self) -> Maintenance:
        from .series import upkeep

        return upkeep.seal_busy(self._transaction, self._read)

    def _release_space(self, done: Maintenance) -> None:
        """Give the space a maintenance pass freed back to the system, or make it reusable at once."""

    # -- alarms

    def put_alarm(self, name: str,
                  make: Callable[[AlarmRow | None], tuple[AlarmRow, list[AlarmHistoryRow]]]) -> AlarmRow:
        from . import alarms

        with self._transaction() as sql:
            found = alarms.read(sql, names=[name], lock=self._lock_job)
            alarm, history = make(found[0] if found else None)
            alarms.write(sql, alarm)
            alarms.add_history(sql, history)
        return alarm

    def change_alarms(self, names: Sequence[str],
                      change: Callable[[AlarmRow], list[AlarmHistoryRow] | None]) -> list[AlarmRow]:
        from . import alarms

        changed = []
        with self._transaction() as sql:
            for alarm in alarms.read(sql, names=sorted(set(names)), lock=self._lock_job):
                history = change(alarm)
                if history is None:
                    continue
                alarms.write(sql, alarm)
                alarms.add_history(sql, history)
                changed.append(alarm)
        return changed

    def delete_alarms(self, names: Sequence[str],
                      history: Callable[[AlarmRow], list[AlarmHistoryRow]]) -> list[AlarmRow]:
        from . import alarms

        with self._transaction() as sql:
            found = alarms.read(sql, names=sorted(set(names)), lock=self._lock_job)
            alarms.delete(sql, [alarm.name for alarm in found])
            alarms.add_history(sql, [item for alarm in found for item in history(alarm)])
        return found

    def alarms(self, *, names: Sequence[str] | None = None, prefix: str | None = None, state: str | None = None,
               after: str | None = None, limit: int | None = None, namespace: str | None = None,
               metric_name: str | None = None) -> list[AlarmRow]:
        from . import alarms

        return self._reading(lambda sql: alarms.read(sql, names=names, prefix=prefix, state=state, after=after,
                                                     limit=limit, namespace=namespace, metric_name=metric_name))

    def claim_due_alarms(self, now_ms: int) -> list[AlarmRow]:
        from . import alarms

        if not self._reading(lambda sql: alarms.any_due(sql, now_ms)):  # most passes: no write lock taken
            return []
        with self._transaction() as sql:
            return alarms.claim_due(sql, now_ms, self._skip_locked)

    def record_evaluations(self, outcomes: list[tuple[AlarmRow, list[AlarmHistoryRow]]]) -> list[AlarmRow]:
        from . import alarms

        if not outcomes:
            return []
        written = []
        with self._transaction() as sql:
            for alarm, history in sorted(outcomes, key=lambda outcome: outcome[0].name):  # one lock order
                if alarms.write_state(sql, alarm):
                    alarms.add_history(sql, history)
                    written.append(alarm)
        return written

    def add_alarm_history(self, items: Sequence[AlarmHistoryRow]) -> None:
        from . import alarms

        with self._transaction() as sql:
            alarms.add_history(sql, items)

    def alarm_history(self, *, name: str | None = None, item_type: str | None = None, start_ms: int | None = None,
                      end_ms: int | None = None, ascending: bool = False, after: tuple[int, int] | None = None,
                      limit: int = 100) -> list[AlarmHistoryRow]:
        from . import alarms

        return self._reading(lambda sql: alarms.history(sql, name=name, item_type=item_type, start_ms=start_ms,
                                                        end_ms=end_ms, ascending=ascending, after=after,
                                                        limit=limit))

    def expire_alarm_history(self, before_ms: int) -> int:
        if not self._read("SELECT 1 FROM alarm_history WHERE timestamp_ms < ? LIMIT 1", (before_ms,)):
            return 0
        from . import alarms

        with self._transaction() as sql:
            return alarms.expire_history(sql, before_ms)


def prepared_points(batch: Batch) -> Any:
    """What ``series.writes.prepare_points`` makes of a batch's points, before the write transaction."""
    if not batch.points and not batch.point_blocks:
        return None
    from .series import writes

    return writes.prepare_points(batch.points, batch.point_blocks)


# -- rows and records ----------------------------------------------------------------------


def _identity(supervisor: str | None) -> SupervisorIdentity | None:
    """A job's supervisor as its row stores it (JSON), or None."""
    return json.loads(supervisor) if supervisor else None


def job_from_row(row: tuple[Any, ...]) -> JobRow:
    """A row of JOB_COLUMNS as a JobRow (JSON columns decoded)."""
    id_, name, status, created, modified, doc, supervisor, stop, diagnostics = row
    return JobRow(
        id_, name, status, created, modified, json.loads(doc),
        _identity(supervisor), stop, json.loads(diagnostics or "[]"),
    )


def _stored_already(sql: Sql, batch: Batch) -> bool:
    """Whether an earlier try committed this batch: a write whose reply was lost (a connection
    dropped during COMMIT) is tried again by the job's writer, and must then change nothing.
    A batch's first log chunk is stored with it, so that chunk tells."""
    if not batch.chunks:
        return False
    stream_id, first_seq, count, stamp, _text = batch.chunks[0]
    return bool(sql.rows("SELECT 1 FROM log_chunks WHERE stream_id = ? AND first_seq = ? AND count = ? "
                         "AND timestamp_ms = ?", (stream_id, first_seq, count, stamp)))


def _stream_filter(prefix: str | None) -> Where:
    """Streams whose name starts with ``prefix`` (every one for none): a range of names, which the
    index on them serves (both backends compare names by code point)."""
    where = Where()
    if prefix:
        where.add("name >= ?", prefix).add("name < ?", prefix_end(prefix))
    return where


def job_place(row: JobRow, sort_by: str) -> tuple[Any, int]:
    """A job's place in the order of ``sort_by``: what :meth:`Store.jobs_after` goes on after."""
    value = {"Name": row.name, "Status": row.status}.get(sort_by, row.creation_time)
    return value, row.id


def stream_place(row: StreamRow, by_last_event: bool) -> tuple[Any, ...]:
    """A stream's place in its order: what :meth:`Store.streams_after` goes on after."""
    return (row.last_event_ms or 0, row.name) if by_last_event else (row.name,)


def chunk_events(rows: Iterable[ChunkRow], stream_id: int, after_seq: int, before_seq: int, limit: int,
                 *, backward: bool = False) -> list[EventRow]:
    """Up to ``limit`` records in chunk rows with after_seq < seq < before_seq, in the rows' order;
    with ``backward``, each chunk's records last first."""
    found: list[EventRow] = []
    for first, _, stamp, text in rows:
        messages = text.split("\n")
        low = max(0, after_seq + 1 - first)
        high = max(low, min(len(messages), before_seq - first))
        if backward:
            low = max(low, high - (limit - len(found)))
            seqs, picked = range(first + high - 1, first + low - 1, -1), messages[low:high][::-1]
        else:
            high = min(high, low + limit - len(found))
            seqs, picked = range(first + low, first + high), messages[low:high]
        # tuple.__new__ by map makes each row in C, without a Python frame: millions of them for a log
        found.extend(map(tuple.__new__, repeat(EventRow), zip(repeat(stream_id), seqs, repeat(stamp), picked)))
        if len(found) >= limit:
            break
    return found


def job_name_in_use(doc: JobDocument) -> ResourceInUse:
    return ResourceInUse(
        "Training job names must be unique within an AWS account and region, and a training job "
        f"with this name already exists ({doc['TrainingJobArn']})"
    )
