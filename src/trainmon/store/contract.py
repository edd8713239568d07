"""The store contract: :class:`Store` is what the rest of trainmon may call, whatever the backend.
:class:`trainmon.store.base.SqlStore` implements it once, in SQL both databases run; ``open_store()``
(``trainmon.store``) picks the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..clock import Clock
from ..cloudwatch.model import MetricKey
from ..cloudwatch.retention import Retention
from ..cloudwatch.statistics import Columns, Sample
from ..jobs.document import JobDocument, SupervisorIdentity
from ..jobs.search import Search
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
from .tuning import TuningRow

if TYPE_CHECKING:
    from ..cloudwatch.datapoints import Datapoints
    from ..cloudwatch.sketch import Rollups

class Store(Protocol):
    """Jobs, log streams and metric points. Every method is one transaction (or one read)."""

    home: Path  # the local data directory: job directories and outputs live there, whatever the backend
    location: str  # where the data is, for messages: a file path, or a database URL without its password
    database_url: str | None  # the URL open_store() takes to open this store again (None: the SQLite file in home)
    retention: Retention  # how long metric data is kept (trainmon.cloudwatch.retention)
    clock: Clock  # what the store's background work (PutMetricData's writer, a maintainer) waits on

    @property
    def database_key(self) -> str:
        """The database, for this process: the SQLite file's real path, or the URL."""
        ...

    def close(self) -> None:
        """Write what PutMetricData queued through this object (waiting a bounded time for a store
        that refuses writes), then close the connection."""
        ...

    # -- jobs
    def create_job(
        self, name: str, doc: JobDocument, creation_time: float, supervisor: SupervisorIdentity | None = None
    ) -> JobRow:
        """Store a new job; ResourceInUse when a job of that name exists."""
        ...

    def get_job(self, name: str) -> JobRow | None: ...

    def supervisors(self, statuses: tuple[str, ...]) -> list[tuple[str, SupervisorIdentity | None]]:
        """The jobs in these statuses, each as its name and its supervisor's identity (what the
        orphan reaper looks at, without reading the documents)."""
        ...

    def jobs_named(self, names: Sequence[str]) -> list[JobRow]:
        """The jobs of these names that exist, in no particular order."""
        ...

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
        """Jobs matching every filter given, in the order of ``sort_by`` (Name, CreationTime or
        Status) then id; at most ``limit``."""
        ...

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
        """A page of :meth:`list_jobs`: up to ``limit`` jobs after ``after``, the place of the last
        job of an earlier page (:func:`job_place`); its cost is independent of the total."""
        ...

    def search_jobs(self, request: Search, offset: int, limit: int) -> tuple[list[JobRow], int]:
        """SageMaker's Search over jobs: up to ``limit`` of those that match, in the request's order
        from ``offset``, and how many match in all (store/search.py)."""
        ...

    def update_job(self, name: str, mutate: Callable[[JobRow], None]) -> JobRow:
        """Read, change and write one job atomically; ``mutate`` edits the row in place."""
        ...

    def delete_job(self, name: str) -> None: ...

    # -- hyperparameter tuning jobs (store/tuning.py); their trials are jobs
    def create_tuning_job(self, name: str, doc: dict[str, Any], creation_time: float) -> TuningRow:
        """Store a new tuning job; ResourceInUse when the name is taken."""
        ...

    def get_tuning_job(self, name: str) -> TuningRow | None: ...

    def tuning_jobs_after(self, after: tuple[Any, ...] | None, limit: int | None, *, status: str | None = None,
                          statuses: Sequence[str] | None = None, name_contains: str | None = None,
                          created_after: float | None = None, created_before: float | None = None,
                          modified_after: float | None = None, modified_before: float | None = None,
                          sort_by: str = "CreationTime", descending: bool = False) -> list[TuningRow]:
        """Up to ``limit`` tuning jobs in the order of ``sort_by``, after ``after`` (``tuning.place``)."""
        ...

    def update_tuning_job(self, name: str, mutate: Callable[[TuningRow], None]) -> TuningRow:
        """Read, change and write one tuning job atomically; ``mutate`` edits the row in place."""
        ...

    def delete_tuning_job(self, name: str) -> None: ...

    # -- log streams
    def add_stream(self, job_id: int, host: str, name: str, creation_ms: int) -> StreamRow: ...

    def streams(self, job_id: int | None = None, *, prefix: str | None = None) -> list[StreamRow]:
        """Log streams (of a job, with a name that starts with ``prefix``) by name."""
        ...

    def streams_after(self, after: tuple[Any, ...] | None, limit: int, *, prefix: str | None = None,
                      by_last_event: bool = False, descending: bool = False) -> list[StreamRow]:
        """A page of streams by name, or ``by_last_event`` (its time, 0 when none yet, then name): up
        to ``limit`` after ``after``, the place of the last stream of an earlier page
        (:func:`stream_place`); its cost is independent of the total."""
        ...

    def stream(self, name: str) -> StreamRow | None: ...

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
        ...

    def log_chunks(self, stream_id: int, *, after_seq: int = -1, start_ms: int | None = None,
                   end_ms: int | None = None) -> Iterator[ChunkRow]:
        """A stream's stored chunks in record order, read as they are taken: from the one holding
        record ``after_seq + 1`` (or the last before it; either may hold earlier records too),
        those with a time in [start_ms, end_ms) (a chunk's records share its time). A reader that
        pages through a log works on a chunk's text at once, with no object per record it passes."""
        ...

    # -- ingestion
    def write_batch(self, batch: Batch) -> None:
        """Log chunks, points, stream counters and diagnostics of one step: all of it or nothing.
        Writing a batch again after an error that left its outcome unknown stores it once."""
        ...

    def log_text(self, stream_id: int, *, after_seq: int = -1, limit: int = 100_000) -> tuple[str, int]:
        """The records after ``after_seq`` as text, each followed by "\n" (whole chunks, about
        ``limit`` records), and the number of the last one: reading a log back costs what reading
        its text does, with no object per record."""
        ...

    def spool_progress(self, stream_id: int) -> dict[str, tuple[int, bool]]:
        """Per pipe ("stdout", "stderr") of a log stream: how far its spool was consumed into stored
        records (``Batch.spools``), and whether just after a "\r"."""
        ...

    # -- points
    def points(
        self,
        job_id: int,
        *,
        names: list[str] | None = None,
        host: str | None = None,
        start_ms: int | None = None,
        end_ms: int | None = None,
    ) -> list[PointRow]: ...

    def job_point_columns(self, job_id: int, *, names: list[str] | None = None, host: str | None = None,
                          start_ms: int | None = None, end_ms: int | None = None) -> JobPoints:
        """:meth:`points` as columns, in the same order."""
        ...

    def point_columns(self, job_id: int, name: str, *, host: str | None = None, start_ms: int | None = None,
                      end_ms: int | None = None) -> PointColumns:
        """One metric's points of a job (all hosts, or ``host``'s) as columns in time order."""
        ...

    def chart_points(self, job_id: int, name: str, *, width: int, host: str | None = None,
                     start_ms: int | None = None, end_ms: int | None = None) -> tuple[PointColumns, int]:
        """One metric's points for a chart ``width`` pixels wide, and how many points the range holds:
        every point, or where there are many, the sealed chunks' overviews (store.series.overview)."""
        ...

    def metric_names(self, job_id: int) -> list[str]: ...

    def final_metrics(self, job_id: int) -> list[tuple[str, float, int]]:
        """Per metric, the last finite value and its time: (name, value, timestamp_ms)."""
        ...

    def final_metrics_of(self, job_ids: Sequence[int]) -> dict[int, list[tuple[str, float, int]]]:
        """:meth:`final_metrics` of several jobs in one read (a page of a job list)."""
        ...

    def metric_ranges_of(self, job_ids: Sequence[int]) -> dict[int, dict[str, tuple[float | None, float | None]]]:
        """Per job and metric, the least and greatest finite value (a page of a job list, in one read)."""
        ...

    def metric_summaries(self, job_id: int) -> dict[str, tuple[int, float | None, float | None]]:
        """Per metric: (points, minimum, maximum) with minimum and maximum over finite values."""
        ...

    # -- CloudWatch metrics
    def put_samples(self, items: list[tuple[MetricKey, int, list[Sample]]]) -> None:
        """Store datapoints now, in one transaction: all of them or nothing (the system monitor's)."""
        ...

    def queue_samples(self, datapoints: Datapoints) -> None:
        """Queue a validated PutMetricData call for the write-behind buffer (store.series.buffer), which
        stores it within a fraction of a second; every metric read of this process writes it first.
        Throttling when the buffer stays full; a StoreError reports datapoints it had to drop."""
        ...

    def flush_samples(self) -> None:
        """Store what PutMetricData queued for this database in this process (StoreError while the
        store refuses it)."""
        ...

    def metric_samples(self, key: MetricKey, start_ms: int, end_ms: int) -> list[Sample]:
        """Datapoints of one metric (exact dimension set) in [start_ms, end_ms), job points included."""
        ...

    def metric_columns(self, key: MetricKey, start_ms: int, end_ms: int) -> dict[str, Columns]:
        """The datapoints of ``metric_samples`` as columns per unit: statistics over raw data
        without an object per datapoint."""
        ...

    def metric_keys(self, namespace: str | None = None, name: str | None = None) -> list[tuple[MetricKey, int]]:
        """Every metric with the time of its newest datapoint; jobs' metrics are in JOB_NAMESPACE."""
        ...

    def metric_keys_after(self, after: tuple[str, str, int] | None, limit: int, namespace: str | None = None,
                          name: str | None = None) -> list[tuple[MetricKey, int, tuple[str, str, int]]]:
        """A page of metrics in a fixed order, after ``after`` (a place an earlier page gave), with
        the time of each one's newest datapoint and its place; its cost is independent of the total."""
        ...

    def metric_data(self, key: MetricKey, start_ms: int, end_ms: int, period_s: int,
                    sketches: bool = True) -> tuple[dict[str, Rollups] | None, dict[str, Columns]]:
        """What the metric's statistics per ``period_s`` over [start_ms, end_ms) are computed from, in
        one snapshot: its roll-up rows per unit where a roll-up tier can serve the period and part of
        the range is rolled up (and no columns; ``sketches=False`` leaves the stored sketches out, no
        percentiles wanted), else None and its ``metric_columns``."""
        ...

    # -- maintenance
    def maintain(self, now_ms: int | None = None, *, retier: bool = False) -> Maintenance:
        """Seal still chunks, roll up whole periods, expire what the retention policy drops; does
        nothing when another process is at it. With ``retier``, the store's roll-up tiers become
        the policy's first (store.series.tiers): what ``trainmon maintain`` asks, never a
        background pass."""
        ...

    def seal_busy(self) -> Maintenance:
        """Seal the chunks of the series writes keep busy now, whatever their age (a running job's
        recent points), so that reads of them decode a few chunks, not hundreds."""
        ...

    # -- alarms
    def put_alarm(self, name: str,
                  make: Callable[[AlarmRow | None], tuple[AlarmRow, list[AlarmHistoryRow]]]) -> AlarmRow:
        """Create or replace one alarm atomically: ``make`` gets the stored alarm (None: a new one)
        and gives the alarm to store and the history items to add with it."""
        ...

    def change_alarms(self, names: Sequence[str],
                      change: Callable[[AlarmRow], list[AlarmHistoryRow] | None]) -> list[AlarmRow]:
        """Change the named alarms that exist, in one transaction: ``change`` edits each in place and
        gives its history items (None: leave that alarm as it is). The alarms changed, by name."""
        ...

    def delete_alarms(self, names: Sequence[str],
                      history: Callable[[AlarmRow], list[AlarmHistoryRow]]) -> list[AlarmRow]:
        """Delete the named alarms that exist, adding ``history``'s items for each; the alarms deleted."""
        ...

    def alarms(self, *, names: Sequence[str] | None = None, prefix: str | None = None, state: str | None = None,
               after: str | None = None, limit: int | None = None, namespace: str | None = None,
               metric_name: str | None = None) -> list[AlarmRow]:
        """Alarms by name (after ``after``, at most ``limit``) matching every filter given."""
        ...

    def claim_due_alarms(self, now_ms: int) -> list[AlarmRow]:
        """The alarms due for evaluation at ``now_ms``, each handed to one caller only: their next
        evaluation is moved on as they are returned."""
        ...

    def record_evaluations(self, outcomes: list[tuple[AlarmRow, list[AlarmHistoryRow]]]) -> list[AlarmRow]:
        """Evaluations' new states with their history items, in one transaction; an alarm changed
        since it was claimed (its revision moved) is left alone. The alarms written."""
        ...

    def add_alarm_history(self, items: Sequence[AlarmHistoryRow]) -> None:
        """Add history items (an action's outcome, written once the delivery has ended)."""
        ...

    def alarm_history(self, *, name: str | None = None, item_type: str | None = None, start_ms: int | None = None,
                      end_ms: int | None = None, ascending: bool = False, after: tuple[int, int] | None = None,
                      limit: int = 100) -> list[AlarmHistoryRow]:
        """History items in [start_ms, end_ms], newest first unless ``ascending``, after the item
        (timestamp, id) ``after``."""
        ...

    def expire_alarm_history(self, before_ms: int) -> int:
        """Delete history items older than ``before_ms``; how many."""
        ...
