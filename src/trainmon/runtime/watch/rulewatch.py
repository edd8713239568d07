"""Evaluating a running job's rules: a thread of its supervisor that reads the job's new points.

Every :data:`EVERY_S` the :class:`RuleWatcher` reads, on a store connection of its own, the
points each host stored since its last pass (only the metrics its rules read; a host at a time,
from where its own points were read through, so a host whose output is stored behind the others'
loses nothing), groups them into records
(one log record's points together, per host) and feeds them to each rule's state machine
(:mod:`trainmon.rules.metric`, one per rule and host), and the new lines of the hosts' tensor
files to the tensor rules (:mod:`trainmon.runtime.watch.tensorfeed`), the steps the tensor hook ended to the
profiler rules that read no step metric, and the profile rows the system
monitor handed over to the profiler rules (:mod:`trainmon.runtime.watch.profilewatch`).
StalledTrainingRule is asked instead whether a host has printed nothing for its threshold, by the injected clock: a host's last output
is the newer of its last stored record and what ``activity`` says was last read (the
supervisor's spool files), so a store that lags behind does not make a talking job look silent,
and a store that cannot be read makes no pass at all. Capture never waits for the rules: they
read what the ingestor has stored (SQLite's WAL and PostgreSQL let readers and the writer run
together) and write the job document only when a rule finds something.

A finding is recorded in the job document (:mod:`trainmon.jobs.rulestatus`: the rule becomes
IssuesFound), sent to the rule's notification targets (:func:`trainmon.runtime.watch.notify.deliver`,
off this thread) and, for a rule with StopTraining, handed to the supervisor, which stops the job
through its usual path. :meth:`RuleWatcher.finish` makes the last pass once the job's output is
all stored, and concludes: the rules that found nothing are NoIssuesFound.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...clock import REAL_CLOCK, Clock
from ...jobs import rulestatus
from ...plainjson import finite
from ...rules import catalog
from ...rules.metric import Finding, MetricRule, Record, StalledTraining
from ...store import JobPoints, JobRow, Store, StreamRow, open_store
from . import notify, tensorfeed
from .profilewatch import ProfilerRules, ProfileTap, ReportWriter

EVERY_S = 1.0
FINISH_TIMEOUT_S = 30.0
MAX_PENDING = 1000  # findings kept for the store while it cannot take them
REPORT_WAIT_S = 600.0  # for the job's final status, before ProfilerReport's report is made anyway
FINAL_TRIES = 3  # the last pass, read again after a failure before the rules give up their verdict
WINDOW_POINTS = 50_000  # about as many points a read of them at a time, whatever the job prints
FIRST_WINDOW_MS = 100
MAX_WINDOW_MS = 86_400_000

Deliver = Callable[[str, dict[str, Any]], None]


class _Cursor:
    """How far a host's points are read. A host's output is stored in the order of its times, so
    what is new is what lies after the millisecond the last pass ended at, and the points of that
    millisecond it did not read (more of them may come in a batch of their own)."""

    def __init__(self) -> None:
        self.since_ms: int | None = None  # the points before this time are read
        self.seen_ms: int | None = None  # and those of this time in seen (the millisecond a pass ended at)
        self.seen: set[tuple[int, int, str]] = set()
        self.window_ms = FIRST_WINDOW_MS  # of the job's time, a read of its points at a time
        self.records = -1  # the host's records when it was last read through

    def windows(self, store: Store, job_id: int, metrics: list[str], host: str, oldest_ms: int,
                newest_ms: int) -> Iterator[JobPoints]:
        """The host's points from where the last pass ended (the first: its oldest record), a window
        of time at a time (about ``WINDOW_POINTS`` each, whatever the job prints: the window narrows
        after a full one and widens after a thin one), through its newest record's time. A read
        that fails ends the pass; the next one starts where it did."""
        since = self.since_ms if self.since_ms is not None else oldest_ms
        while since <= newest_ms:
            until = min(newest_ms + 1, since + self.window_ms)
            points = store.job_point_columns(job_id, names=metrics, host=host, start_ms=since, end_ms=until)
            size = len(points.stamps)
            if size > WINDOW_POINTS:
                self.window_ms = max(1, self.window_ms // 2)
            elif size < WINDOW_POINTS // 4:
                self.window_ms = min(MAX_WINDOW_MS, self.window_ms * 2)
            points = self._unseen(points, newest_ms if until > newest_ms else None)
            self.since_ms = since = until if until <= newest_ms else newest_ms
            if len(points.stamps):
                yield points
            if until > newest_ms:
                return

    def _unseen(self, points: JobPoints, last_ms: int | None) -> JobPoints:
        """``points`` without those of the millisecond a pass ended at that it read; with ``last_ms``
        (this read ends a pass there), those read now of that millisecond noted for the next pass."""
        if self.seen and len(points.stamps) and points.stamps[0] == self.seen_ms:
            at = np.flatnonzero(points.stamps == self.seen_ms)
            keep = np.ones(len(points.stamps), bool)
            keep[at] = [(stream, seq, points.names[metric]) not in self.seen for stream, seq, metric in
                        zip(points.streams[at].tolist(), points.seqs[at].tolist(), points.metrics[at].tolist(),
                            strict=True)]
            points = JobPoints(points.names, points.hosts, *(column[keep] for column in points[2:]))
        if last_ms is not None:
            at = np.flatnonzero(points.stamps == last_ms)
            if last_ms != self.seen_ms:
                self.seen_ms, self.seen = last_ms, set()
            self.seen.update(zip(points.streams[at].tolist(), points.seqs[at].tolist(),
                                 [points.names[metric] for metric in points.metrics[at].tolist()], strict=True))
        return points


@dataclass
class _Rule:
    setup: catalog.RuleSetup
    per_host: dict[str, MetricRule | StalledTraining] = field(default_factory=dict)
    failed: bool = False
    watched: frozenset[str] = frozenset()  # the metrics it reads
    stall: bool = False  # StalledTrainingRule: asked about silence, not fed records
    profiler: bool = False  # a profiler rule: fed by ProfilerRules (runtime.watch.profilewatch), not here

    def __post_init__(self) -> None:
        self.profiler = self.setup.rule in catalog.PROFILER_RULES
        self.watched = frozenset() if self.profiler else frozenset(self.setup.metrics)
        self.stall = self.setup.rule == "StalledTrainingRule"

    def evaluator(self, host: str) -> MetricRule | StalledTraining:
        if host not in self.per_host:
            self.per_host[host] = catalog.evaluator(self.setup)
        return self.per_host[host]


def evaluated_rules(doc: Any) -> list[catalog.RuleSetup]:
    """The job's rules that trainmon evaluates (configurations as stored: checked when the job was created)."""
    return [rule for _, rule in catalog.setups(doc) if rule.evaluated and not rule.issues]


class RuleWatcher(threading.Thread):
    """The rules of one running job, evaluated on a thread of their own (this one: :meth:`start` it,
    or ``clock.start(watcher)`` with a :class:`~trainmon.clock.ManualClock`, which returns once the
    first pass is done)."""

    def __init__(self, store: Store, job: JobRow, *, clock: Clock = REAL_CLOCK, every_s: float = EVERY_S,
                 on_stop: Callable[[str], None] | None = None, active: Callable[[], bool] = lambda: True,
                 activity: Callable[[], dict[str, float]] = dict, deliver: Deliver = notify.deliver,
                 profile: ProfileTap | None = None, stored_through: Callable[[], int | None] = lambda: None,
                 report: ReportWriter | None = None, tensor_files: Mapping[str, Path] | None = None) -> None:
        super().__init__(name="trainmon-rules", daemon=True)
        self._home, self._url, self._retention = store.home, store.database_url or "", store.retention
        self.job_name, self.job_id = job.name, job.id
        self.arn = job.doc["TrainingJobArn"]
        self.rules = [_Rule(setup) for setup in evaluated_rules(job.doc)]
        self.metrics = sorted({name for rule in self.rules for name in rule.setup.metrics})
        self._record_rules = any(rule.watched and not rule.stall for rule in self.rules)  # fed record by record
        hooked = any(r.setup.rule in catalog.TENSOR_RULES and not r.setup.metrics for r in self.rules)  # reads the hook's
        self.profiling = ProfilerRules([rule.setup for rule in self.rules if rule.profiler], profile,  # the monitor's rows
                                       hook=hooked)
        self.tensors = tensorfeed.TensorFeed.for_job(self._home, job.doc, [rule.setup for rule in self.rules],
                                                  steps=self.profiling.hook_steps, files=tensor_files)
        self.clock, self.every_s = clock, every_s
        self.on_stop, self.active, self.activity, self.deliver = on_stop, active, activity, deliver
        self.stored_through = stored_through  # the time the job's output is stored up to (None: not known)
        self.report = report  # ProfilerReport's writer of the profiling report
        self.started_s = clock.wall()
        self.error: Exception | None = None  # the last pass's failure, if it failed
        self.findings: list[dict[str, Any]] = []  # every finding of this run, as recorded
        self.passes = 0
        self._cursors: dict[str, _Cursor] = {}  # per host: how far its points are read
        self._pending: list[dict[str, Any]] = []  # findings the store has not taken yet
        self._stopped = False
        self._final = False
        self._abandoned = False
        self._signal = clock.stop_signal()
        self._concluded = threading.Event()  # the final statuses are written (or given up)
        self._job_ended = threading.Event()  # the job's own final status is written (job_ended)

    def finish(self, timeout_s: float = FINISH_TIMEOUT_S) -> None:
        """The last pass, over everything the job stored, then the final statuses (the job's output
        must be stored: the supervisor calls this after the drain)."""
        self._final = True
        self._signal.set()
        if self.is_alive():  # ProfilerReport's report is written after, on this thread: join() waits for it
            self._concluded.wait(timeout_s)

    def abandon(self) -> None:
        """No final verdict: the job's output was left in its spool, unstored (the rules stay
        InProgress, and a job that ended shows them Stopped)."""
        self._abandoned = True
        self._signal.set()

    def job_ended(self) -> None:
        """The job's final status is written: ProfilerReport's report, made after it, shows the job
        as it ended (the supervisor calls this once it has concluded the job)."""
        self._job_ended.set()

    # -- the thread ---------------------------------------------------------------------------

    def run(self) -> None:
        try:
            store = open_store(self._home, database_url=self._url, retention=self._retention)
        except Exception as exc:  # the job goes on without its rules (left InProgress: Stopped once it ends)
            self.error = exc
            print(f"trainmon: warning: rules: {exc}; the job itself is not affected", file=sys.stderr)
            return
        try:
            deadline = self.clock.monotonic()
            while not self._abandoned:
                final = self._final
                read = self._pass(store, final=final)
                if final:
                    for _ in range(FINAL_TRIES - 1):  # the job's last points decide: not a verdict without them
                        if read:
                            break
                        self.clock.stop_signal().wait_until(self.clock.monotonic() + 1.0)  # a pause, on the clock
                        read = self._pass(store, final=True)
                    if read:
                        recorded = self._conclude(store)
                        self._concluded.set()
                        # once the verdicts are in (not on a store that cannot take them), and the job's
                        # final status (packing the model can take a while: the report waits, bounded)
                        if recorded and self.profiling.has_report():
                            self._job_ended.wait(REPORT_WAIT_S)
                            self.profiling.write_report(store, self.job_name, self.report)
                    else:  # left InProgress: a job that ended shows them Stopped, not NoIssuesFound
                        print(f"trainmon: warning: rules: the job's last points could not be read ({self.error}); "
                              "the rules give no final verdict", file=sys.stderr)
                    return
                deadline += self.every_s
                deadline = max(deadline, self.clock.monotonic())
                self._signal.wait_until(deadline)
        finally:
            self._concluded.set()  # whatever happened: finish() waits no longer
            store.close()

    def _pass(self, store: Store, *, final: bool) -> bool:
        """One pass; whether it could read the new points."""
        found: list[dict[str, Any]] = []
        try:
            self.evaluate(store, check_stalls=not final and self.active(), found=found)
            self.passes += 1
            self.error = None
        except Exception as exc:  # a store outage, say: the next pass reads from where this one stopped
            self.error = exc
            self._handle(store, found, final=final)  # what the windows read before it gave
            return False
        self._handle(store, found, final=final)
        return True

    def evaluate(self, store: Store, *, check_stalls: bool = True,
                 found: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """One pass: the new points fed to the rules, and the findings they gave (as recorded; into
        ``found``, when given, as they come)."""
        # Profile datapoints are judged only up to where the job's output is stored (read before the
        # points): a step printed before a datapoint is known when the datapoint is judged, however
        # far the store lags. The last pass comes after the drain: everything.
        horizon_ms = None if self._final else self.stored_through()
        streams = store.streams(self.job_id)
        found = [] if found is None else found
        if self.metrics:
            for points in self._new_points(store, streams):
                if self._record_rules:
                    for host, record in self._records(points):
                        found.extend(self._observe(host, record))
                found.extend(self._profiled(self.profiling.observe_points(points)))
        try:  # on its own: the tensor files' trouble never costs this pass's metric findings
            found.extend(self._observe_tensors())
        except Exception as exc:
            self.tensors.trouble_in(exc)
        found.extend(self._hook_steps())  # what the tensor files held, read even if the pass failed on them
        found.extend(self._profiled(self.profiling.evaluate(horizon_ms)))  # after the steps the records and files held
        if check_stalls:
            last: dict[str, float] = {}
            for stream in streams:
                at = (stream.last_event_ms or 0) / 1000
                last[stream.host] = max(last.get(stream.host, self.started_s), at, self.started_s)
            for host, at in self.activity().items():  # read but maybe not stored yet (a store that lags)
                last[host] = max(last.get(host, self.started_s), at)
            now_s = self.clock.wall()
            for rule in self.rules:
                if rule.stall and not rule.failed:
                    for host, at in sorted(last.items()):
                        stalled = rule.evaluator(host)
                        assert isinstance(stalled, StalledTraining)
                        finding = stalled.check(now_s, at)
                        if finding is not None:
                            found.append(self._recorded(rule, host, finding))
        return found

    def _new_points(self, store: Store, streams: list[StreamRow]) -> Iterator[JobPoints]:
        """The points each host stored since the last pass, a host at a time (the rules keep a
        host's state apart): a host whose output is stored late, behind the others', has its
        points read however far the others' times are ahead. A host with nothing new costs nothing."""
        spans: dict[str, tuple[int, int, int]] = {}  # host -> its streams' first and last times, and records
        for stream in streams:
            if stream.first_event_ms is None or stream.last_event_ms is None:
                continue
            first, last, records = spans.get(stream.host, (stream.first_event_ms, stream.last_event_ms, 0))
            spans[stream.host] = (min(first, stream.first_event_ms), max(last, stream.last_event_ms),
                                  records + stream.records)
        for host, (first, last, records) in sorted(spans.items()):
            cursor = self._cursors.setdefault(host, _Cursor())
            if records != cursor.records:
                yield from cursor.windows(store, self.job_id, self.metrics, host, first, last)
                cursor.records = records  # (after the reads: a read that fails is made again)

    @staticmethod
    def _records(points: JobPoints) -> Iterator[tuple[str, Record]]:
        """Points (in time, stream and record order) as records: one log record's points together."""
        streams, seqs = points.streams, points.seqs
        starts = np.flatnonzero(np.concatenate(([True], (streams[1:] != streams[:-1]) | (seqs[1:] != seqs[:-1]))))
        names = [points.names[metric] for metric in points.metrics.tolist()]
        values, stamps, stream_of = points.values.tolist(), points.stamps.tolist(), streams.tolist()
        for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(values)], strict=True):
            yield (points.hosts.get(stream_of[start], "algo-1"),
                   Record(stamps[start] / 1000, dict(zip(names[start:end], values[start:end], strict=True))))

    def _observe(self, host: str, record: Record) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for rule in self.rules:
            if rule.failed or rule.stall or rule.watched.isdisjoint(record.values):
                continue
            evaluator = rule.per_host.get(host) or rule.evaluator(host)
            assert not isinstance(evaluator, StalledTraining)
            try:
                findings = evaluator.observe(record)
            except Exception as exc:  # a rule that breaks is reported Error; the others go on
                rule.failed = True
                self._pending.append({"Error": f"the evaluation of {rule.setup.rule} failed: {exc!r}",
                                      "RuleConfigurationName": rule.setup.name})
                continue
            found.extend(self._recorded(rule, host, finding) for finding in findings)
        return found

    def _observe_tensors(self) -> list[dict[str, Any]]:
        """What the hosts' tensor files gained since the last pass, fed to the tensor rules (runtime.watch.tensorfeed)."""
        found, failures = self.tensors.evaluate(final=self._final, failed=[r.setup.name for r in self.rules if r.failed])
        by_name = {rule.setup.name: rule for rule in self.rules}
        for name, why in failures:
            by_name[name].failed = True
            self._pending.append({"Error": why, "RuleConfigurationName": name})
        return [self._recorded(by_name[name], host, finding) for name, host, finding in found]

    def _hook_steps(self) -> list[dict[str, Any]]:
        """The step ends the tensor hook wrote, to the profiler rules that read no step metric."""
        found: list[tuple[str, str, Finding]] = []
        for host, step, at in self.tensors.take_steps():
            found.extend(self.profiling.observe_step(host, step, at))
        return self._profiled(found)

    def _profiled(self, found: list[tuple[str, str, Finding]]) -> list[dict[str, Any]]:
        """The profiler rules' findings (by RuleConfigurationName) as recorded, and their failures noted."""
        by_name = {rule.setup.name: rule for rule in self.rules}
        for error in self.profiling.take_errors():
            by_name[error["RuleConfigurationName"]].failed = True
            self._pending.append(error)
        return [self._recorded(by_name[name], host, finding) for name, host, finding in found]

    def _recorded(self, rule: _Rule, host: str, finding: Finding) -> dict[str, Any]:
        """A finding as the job document keeps it and notifications carry it."""
        actions = (["StopTraining"] if rule.setup.stop_training else []) + [f"Notify {t}" for t in rule.setup.notify]
        entry: dict[str, Any] = {"RuleConfigurationName": rule.setup.name, "RuleName": rule.setup.rule,
                                 "Host": host, "Time": finding.timestamp_s, "Message": finding.message,
                                 "Values": dict(finding.values), "Thresholds": dict(finding.thresholds),
                                 "Actions": actions}
        if finding.step is not None:
            entry["Step"] = finding.step
        if finding.metric is not None:
            entry["Metric"] = finding.metric
        if finding.tensor is not None:
            entry["Tensor"] = finding.tensor
        return finite(entry)  # type: ignore[no-any-return]  # a dict stays a dict

    # -- what a finding does -------------------------------------------------------------------

    def _handle(self, store: Store, found: list[dict[str, Any]], *, final: bool) -> None:
        self._pending.extend(found)
        del self._pending[:-MAX_PENDING]
        if self._pending:
            self._write(store)
        for finding in found:
            self.findings.append(finding)
            self._act(finding, final=final)

    def _write(self, store: Store) -> None:
        pending = list(self._pending)
        now = self.clock.wall()

        def mutate(row: JobRow) -> None:
            for entry in pending:
                if "Error" in entry:
                    rulestatus.set_error(row.doc, entry["RuleConfigurationName"], entry["Error"], now)
                else:
                    rulestatus.add_finding(row.doc, entry, now)

        try:
            store.update_job(self.job_name, mutate)
        except Exception as exc:  # kept, and written at the next pass
            self.error = exc
            return
        del self._pending[:len(pending)]

    def _act(self, finding: dict[str, Any], *, final: bool) -> None:
        rule = next(r.setup for r in self.rules if r.setup.name == finding["RuleConfigurationName"])
        payload = {"TrainingJobName": self.job_name, "TrainingJobArn": self.arn,
                   "RuleConfigurationName": rule.name, "RuleEvaluationStatus": "IssuesFound", "Finding": finding}
        for target in rule.notify:
            self.deliver(target, payload)
        if rule.stop_training and not final and not self._stopped and self.on_stop is not None:
            self._stopped = True
            named = rule.name if rule.name == rule.rule else f"{rule.name} ({rule.rule})"
            self.on_stop(f"rule {named} found an issue on {finding['Host']}: {finding['Message']}")

    def _conclude(self, store: Store) -> bool:
        """The final statuses written; whether they could be."""
        now = self.clock.wall()
        details = self.tensors.details()  # what a tensor rule that found nothing had to read

        def concluded(row: JobRow) -> None:
            rulestatus.conclude(row.doc, now, details)
            self.profiling.annotate(row.doc)  # what each profiler rule could not judge, and why

        for _ in range(3):
            if self._pending:
                self._write(store)
            if self._pending:
                continue  # findings first: a rule that found something must not conclude NoIssuesFound
            try:
                store.update_job(self.job_name, concluded)
                return True
            except Exception as exc:
                self.error = exc
        print(f"trainmon: warning: rules: could not record their final statuses: {self.error}", file=sys.stderr)
        return False
