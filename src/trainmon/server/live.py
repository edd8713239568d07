"""Live updates as Server-Sent Events: a follower looks at the store every ``poll_s`` and sends
what is new. Every server process reads the same store, so any of them can follow any job.

A job's stream sends ``status`` (on connecting and on each change), ``points`` (each metric's new
points, with the log record of each), ``log`` (new records, with the positions to resume from),
``definitions`` (what each metric definition matched and rejected, when that changed), ``rules``
(the rules' statuses and ``RuleFindingCounts``, when they changed) and, once the job has ended and everything it wrote was
sent, ``end``. The jobs' stream sends
``job`` whenever a job's status or final metrics change and ``deleted`` when one goes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol, cast

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse

from ..api import sagemaker
from ..api import trainmon as trainmon_api
from ..api.times import as_datetimes
from ..jobs.status import TERMINAL
from ..read.charts import points_after
from ..read.downsample import chart_payload
from ..runtime.job import orphans
from ..store import JobRow, Store
from .jsonio import dumps

POINTS_PER_EVENT = 20_000  # per metric; more come in the next poll
RECORDS_PER_EVENT = 2_000
HEARTBEAT_S = 15.0
RULE_STATUSES = ("DebugRuleEvaluationStatuses", "ProfilerRuleEvaluationStatuses")

Event = tuple[str, Any]


class Follower(Protocol):
    finished: bool

    def poll(self) -> list[Event]: ...


def status_of(row: JobRow) -> dict[str, Any]:
    doc = row.doc
    fields = {"TrainingJobName": row.name, "TrainingJobStatus": row.status, "SecondaryStatus": doc["SecondaryStatus"],
              "LastModifiedTime": row.last_modified_time}
    for name in ("FailureReason", "TrainingStartTime", "TrainingEndTime", "SecondaryStatusTransitions"):
        if name in doc:
            fields[name] = doc[name]
    return as_datetimes(fields)


class JobFollower:
    """What is new in one job since the last poll."""

    def __init__(self, store: Store, name: str, *, since_ms: int | None, log_after: Any, log_tail: bool) -> None:
        self.store = store
        self.name = name
        self.finished = False
        self._status: tuple[Any, ...] | None = None
        self._definitions: Any = None
        self._rules: Any = None
        self._counts: dict[str, int] = {}
        self._since = since_ms if since_ms is not None else int(time.time() * 1000)  # None: points from now on
        self._cursor: dict[str, tuple[int, int, int]] = {}  # per metric: the last point sent (ms, stream, seq)
        self._logs = log_tail or log_after is not None
        self._after: dict[str, int] | None = dict(log_after) if isinstance(log_after, dict) else None
        self._job_id: int | None = None

    def poll(self) -> list[Event]:
        row = self.store.get_job(self.name)
        if row is None:
            self.finished = True
            return [("deleted", {"TrainingJobName": self.name})]
        row = orphans.reaped(self.store, row)  # (its supervisor gone: an open page sees the job end, not wait on it)
        events: list[Event] = []
        ended = row.status in TERMINAL  # read before the data, so nothing written after is missed
        if self._job_id is None:
            self._start(row)
        status = (row.status, row.doc["SecondaryStatus"], row.last_modified_time)
        if status != self._status:
            self._status = status
            events.append(("status", status_of(row)))
        if row.diagnostics != self._definitions:
            self._definitions = row.diagnostics
            events.append(("definitions", {"Definitions": row.diagnostics}))
        doc = cast(dict[str, Any], row.doc)  # read by name, not copied: this runs at every poll
        rules = {name: doc[name] for name in RULE_STATUSES if name in doc}
        if rules:  # a rule already IssuesFound finds more: its count moves, not its status
            rules["RuleFindingCounts"] = {name: kept["Count"] for name, kept in doc.get("RuleFindings", {}).items()}
        if rules != self._rules:
            self._rules = rules
            if rules:
                events.append(("rules", as_datetimes(rules)))
        events.extend(self._points(row))
        if self._logs:
            events.extend(self._records())
        if ended and not any(kind in ("points", "log", "definitions", "rules") for kind, _ in events):
            self.finished = True
            events.append(("end", {"TrainingJobStatus": row.status}))
        return events

    def _start(self, row: JobRow) -> None:
        self._job_id = row.id
        if self._logs and self._after is None:
            self._after = {s.name: s.records - 1 for s in self.store.streams(row.id)}

    def _points(self, row: JobRow) -> list[Event]:
        news: dict[str, Any] = {}
        for name, (count, _, _) in sorted(self.store.metric_summaries(row.id).items()):
            if count == self._counts.get(name):
                continue
            columns, waiting = points_after(self.store, row.id, name, self._cursor.get(name), self._since)
            stamps, streams, seqs = columns.stamps, columns.streams, columns.seqs
            chosen = waiting[:_cut(stamps, streams, seqs, waiting)]
            if len(chosen) == len(waiting):
                self._counts[name] = count  # all of them sent (else the rest go in the next poll)
            if not len(chosen):
                continue
            last = chosen[-1]
            self._cursor[name] = (int(stamps[last]), int(streams[last]), int(seqs[last]))
            news[name] = {**chart_payload(stamps[chosen], columns.values[chosen]),
                          "Stream": streams[chosen].tolist(), "Record": (seqs[chosen] + 1).tolist()}
        return [("points", news)] if news else []

    def _records(self) -> list[Event]:
        page = trainmon_api.get_job_log_records(self.store, TrainingJobName=self.name, After=self._after,
                                                Limit=RECORDS_PER_EVENT)
        self._after = page["After"]
        if not page["Records"]:
            return []
        return [("log", {"Records": page["Records"], "After": page["After"]})]


def _cut(stamps: Any, streams: Any, seqs: Any, waiting: Any) -> int:
    """How many of the ``waiting`` points one event sends: POINTS_PER_EVENT, or more so that the
    cut never falls between points of one record (two definitions of one name each give one), since
    the next poll starts after the last record sent."""
    if len(waiting) <= POINTS_PER_EVENT:
        return len(waiting)
    last, more = waiting[POINTS_PER_EVENT - 1], waiting[POINTS_PER_EVENT:]
    same = (stamps[more] == stamps[last]) & (streams[more] == streams[last]) & (seqs[more] == seqs[last])
    return POINTS_PER_EVENT + (len(more) if same.all() else int(same.argmin()))


class JobsFollower:
    """Every job's status and final metrics, as they change."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.finished = False
        self._seen: dict[str, tuple[Any, ...]] | None = None

    def poll(self) -> list[Event]:
        orphans.reap_orphans(self.store)  # (as a list of jobs does: an open list sees a job whose supervisor died fail)
        rows = self.store.list_jobs()
        seen: dict[str, tuple[Any, ...]] = {}
        events: list[Event] = []
        # the final metrics of a job seen ended already no longer change (read once more as it ends)
        settled = {row.name: known[-1] for row in rows
                   if (known := (self._seen or {}).get(row.name)) is not None and known[0] in TERMINAL}
        read = self.store.final_metrics_of([row.id for row in rows if row.name not in settled])
        for row in rows:
            finals = settled[row.name] if row.name in settled else tuple(read.get(row.id, []))
            state = (row.status, row.doc["SecondaryStatus"], row.last_modified_time, finals)
            seen[row.name] = state
            if self._seen is not None and self._seen.get(row.name) != state:
                events.append(("job", {**sagemaker.summary(row), "TrainingStartTime": row.doc.get("TrainingStartTime"),
                                       "HyperParameters": row.doc.get("HyperParameters", {}),
                                       "FinalMetrics": {name: value for name, value, _ in finals}}))
        if self._seen is not None:
            events.extend(("deleted", {"TrainingJobName": name}) for name in self._seen.keys() - seen.keys())
        self._seen = seen
        return events


def stream(request: Request, follower: Follower, poll_s: float) -> StreamingResponse:
    return StreamingResponse(_events(request, follower, poll_s), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _events(request: Request, follower: Follower, poll_s: float) -> AsyncIterator[bytes]:
    quiet_s = 0.0
    yield b"retry: 1000\n\n"
    while not follower.finished:
        events = await anyio.to_thread.run_sync(follower.poll)
        for kind, data in events:
            yield b"event: " + kind.encode() + b"\ndata: " + dumps(data) + b"\n\n"
        quiet_s = 0.0 if events else quiet_s + poll_s
        if quiet_s >= HEARTBEAT_S:
            quiet_s = 0.0
            yield b": still here\n\n"
        if follower.finished or await request.is_disconnected():
            return
        await asyncio.sleep(poll_s)
