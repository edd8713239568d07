"""A running job's profiler rules: the monitor's profile rows handed over, evaluated on the rules' thread.

The system monitor makes a profile row per host at every profiling tick
(:meth:`~trainmon.runtime.watch.monitor.SystemMonitor._profile`). A :class:`ProfileTap` takes each one as
it is made and never makes the monitor wait: it is a bounded queue that, when full, drops its
oldest row and counts it, and the count is told in the findings (``dropped_datapoints``) and in
the rules' final StatusDetails, so nothing is lost silently. The profile itself keeps every row.

On each pass of the :class:`~trainmon.runtime.watch.rulewatch.RuleWatcher` (its thread), the
:class:`ProfilerRules` of the job take the records of the pass first, for the steps they hold (a
step metric's value, or each point of the loss metric, see :mod:`trainmon.rules.profiler_setup`),
then the steps the tensor hook's files hold (:meth:`ProfilerRules.observe_step`), then what the tap holds, a datapoint at a time, each fed to the state machines of every profiler
rule for its host (:mod:`trainmon.rules.profiler`; ProfilerReport runs ten of them). Steps first,
and only the datapoints made before the time the job's output is stored through (the ingestor's
horizon; the others wait in the tap for a later pass): a datapoint past MaxInitializationTime's
threshold is judged knowing every step printed before it, however far the store lags.

When the watcher concludes, :meth:`ProfilerRules.annotate` writes into each profiler rule's
StatusDetails what it could not judge and why ("no GPU on algo-1"), and then
:meth:`ProfilerRules.write_report` has ProfilerReport write the profiling report
(``trainmon.report.write_job_report``), its location, or why there is none, going into the same
StatusDetails. A report that fails is a line there, never the job's failure.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ...jobs.document import JobDocument
from ...rules import profiler, profiler_setup
from ...rules.catalog import RuleSetup
from ...rules.metric import Finding
from ...store import JobPoints, JobRow, Store

CAPACITY_ROWS = 4096  # about 7 minutes of one host at 100 ms; a pass takes them every second
MAX_DETAILS_CHARS = 1024  # StatusDetails' length in SageMaker's model

Found = tuple[str, str, Finding]  # (RuleConfigurationName, host, finding)

ReportWriter = Callable[[Store, str], str]  # a job's profiling report written: where it is


class ProfileTap:
    """Profile rows from the monitor's thread to the rules' thread: :meth:`put` never waits (it
    holds a lock for an append), and past ``capacity_rows`` the oldest row goes and is counted."""

    def __init__(self, capacity_rows: int = CAPACITY_ROWS) -> None:
        self.capacity_rows = capacity_rows
        self.dropped = 0  # rows dropped so far, because the rules did not take them in time
        self._rows: deque[tuple[str, int, dict[str, float]]] = deque()
        self._lock = threading.Lock()

    def put(self, host: str, timestamp_ms: int, values: dict[str, float]) -> None:
        with self._lock:
            if len(self._rows) >= self.capacity_rows:
                self._rows.popleft()
                self.dropped += 1
            self._rows.append((host, timestamp_ms, values))

    def take(self, until_ms: int | None = None) -> list[tuple[str, int, dict[str, float]]]:
        """The rows held (those made before ``until_ms``, when given), oldest first; the others stay."""
        with self._lock:
            if until_ms is None:
                rows = list(self._rows)
                self._rows.clear()
            else:
                rows = []
                while self._rows and self._rows[0][1] < until_ms:
                    rows.append(self._rows.popleft())
        return rows


@dataclass
class _Configured:
    """One profiler rule configuration: its state machines (and their step sources) per host."""

    setup: RuleSetup
    per_host: dict[str, list[tuple[profiler.ProfilerRule, profiler_setup.StepSource | None]]] = field(
        default_factory=dict)
    failed: bool = False
    hook: bool = False  # the job's rules read the tensor hook's records: its steps are expected

    @property
    def report(self) -> bool:
        return self.setup.rule == "ProfilerReport"

    def rules(self, host: str) -> list[tuple[profiler.ProfilerRule, profiler_setup.StepSource | None]]:
        made = self.per_host.get(host)
        if made is None:
            made = self.per_host[host] = profiler_setup.evaluators(self.setup, hook=self.hook)
        return made


class ProfilerRules:
    """The profiler rules of one job (configurations read and without issues), fed on the rules' thread.

    ``hook``: the job's rules read the tensor hook's records (see :func:`profiler_setup.evaluators`).
    :attr:`hook_steps` says whether a rule takes the hook's steps, for the watcher to read them."""

    def __init__(self, setups: Sequence[RuleSetup], tap: ProfileTap | None = None, *, hook: bool = False) -> None:
        self.configured = [_Configured(setup, hook=hook) for setup in setups]
        self.tap = tap
        self.hook_steps = any(profiler_setup.reads_hook_steps(setup) for setup in setups)
        self._hooked: set[str] = set()  # hosts the hook's steps came from: the loss's points are not steps there
        self.metrics = frozenset(name for setup in setups for name in setup.metrics)  # step sources to read
        self.datapoints: dict[str, int] = {}  # per host, every datapoint taken
        self.errors: list[tuple[str, str]] = []  # (RuleConfigurationName, why) of rules whose evaluation failed
        self._points: dict[tuple[str, str], int] = {}  # (host, metric): points so far, for counted steps

    @property
    def dropped(self) -> int:
        return self.tap.dropped if self.tap is not None else 0

    # -- feeding ------------------------------------------------------------------------------

    def observe_points(self, points: JobPoints) -> list[Found]:
        """Points of the job's output (the metrics read here; in time, stream and record order): the
        steps they hold, to each step rule a host's at a time. A record counts once for a metric,
        with its last value of it (several definitions may share a name)."""
        names = self.metrics.intersection(points.names)
        if not self.configured or not names:
            return []
        found: list[Found] = []
        for name in sorted(names):
            rows = np.flatnonzero(points.metrics == points.names.index(name))
            streams, seqs = points.streams[rows], points.seqs[rows]
            last = np.ones(len(rows), bool)  # the last point of its record
            last[:-1] = (streams[1:] != streams[:-1]) | (seqs[1:] != seqs[:-1])
            rows, streams = rows[last], streams[last]
            for stream in dict.fromkeys(streams.tolist()):
                host = points.hosts.get(stream, "algo-1")
                mine = rows[streams == stream]
                counted = self._points.get((host, name), 0)
                self._points[(host, name)] = counted + len(mine)
                values = points.values[mine]
                stamps_s = (points.stamps[mine] / 1000).tolist()
                found.extend(self._steps(host, name, counted, values, stamps_s))
        return found

    def _steps(self, host: str, name: str, counted: int, values: np.ndarray, stamps_s: list[float]) -> list[Found]:
        """A host's step points of one metric (``counted`` of them before), to the rules whose steps they are."""
        found: list[Found] = []
        for configured in self.configured:
            if configured.failed:
                continue
            try:
                for rule, source in configured.rules(host):
                    if not rule.reads_steps or source is None or source.metric != name or (
                            source.counted and host in self._hooked):
                        continue
                    if source.counted:
                        steps, times = list(range(counted + 1, counted + 1 + len(values))), stamps_s
                    else:
                        finite = np.isfinite(values)
                        steps = [int(value) for value in values[finite].tolist()]
                        times = stamps_s if finite.all() else np.array(stamps_s)[finite].tolist()
                    found.extend(self._found(configured, host, rule.observe_steps(steps, times)))
            except Exception as exc:  # the rule is reported Error; the others go on
                self._fail(configured, exc)
        return found

    def observe_step(self, host: str, step: int, timestamp_s: float) -> list[Found]:
        """A step of the training loop on ``host`` from the tensor hook (``timestamp_s``: when it
        ended), heard by the step rules without a step metric; call it on the rules' thread, within
        a pass, in step order. From the first on a host, the loss's points are no steps there: a
        StepOutlier that counted them starts anew (durations from both would be mixed), and
        MaxInitializationTime keeps the earliest first step of either."""
        found: list[Found] = []
        first = host not in self._hooked
        self._hooked.add(host)
        for configured in self.configured:
            if configured.failed:
                continue
            try:
                made = configured.rules(host)
                for index, (rule, source) in enumerate(made):
                    if source is not None and not source.counted:
                        continue  # a step metric's steps win
                    if first and source is not None and isinstance(rule, profiler.StepOutlier):
                        rule = profiler.StepOutlier(stddev=rule.stddev, n_outliers=rule.n_outliers)
                        made[index] = (rule, source)
                    found.extend(self._found(configured, host, rule.observe_step(step, timestamp_s)))
            except Exception as exc:
                self._fail(configured, exc)
        return found

    def evaluate(self, until_ms: int | None = None) -> list[Found]:
        """The datapoints the tap holds (made before ``until_ms``, when given: the others wait for the
        next call), fed to every rule, and what they found."""
        if self.tap is None or not self.configured:
            return []
        found: list[Found] = []
        for host, timestamp_ms, values in self.tap.take(until_ms):
            self.datapoints[host] = self.datapoints.get(host, 0) + 1
            datapoint = profiler.tick(timestamp_ms, values)
            for configured in self.configured:
                if configured.failed:
                    continue
                try:
                    for rule, _ in configured.rules(host):
                        findings = rule.observe(datapoint)
                        if findings:
                            found.extend(self._found(configured, host, findings))
                except Exception as exc:
                    self._fail(configured, exc)
        return found

    def _found(self, configured: _Configured, host: str, findings: list[Finding]) -> list[Found]:
        shown = []
        for finding in findings:
            if configured.report:  # ProfilerReport's: say which of its rules found it
                finding = replace(finding, message=f"{finding.rule}: {finding.message}")
            if self.dropped:
                finding = replace(finding, values={**finding.values, "dropped_datapoints": float(self.dropped)})
            shown.append((configured.setup.name, host, finding))
        return shown

    def _fail(self, configured: _Configured, exc: Exception) -> None:
        configured.failed = True
        self.errors.append((configured.setup.name, f"the evaluation of {configured.setup.rule} failed: {exc!r}"))

    def take_errors(self) -> list[dict[str, Any]]:
        """Rules whose evaluation failed since the last call, as the watcher records errors."""
        errors, self.errors = self.errors, []
        return [{"Error": why, "RuleConfigurationName": name} for name, why in errors]

    # -- the end ------------------------------------------------------------------------------

    def notes(self, configured: _Configured) -> list[str]:
        """What a configuration could not judge, and why, one line each (ProfilerReport: which of
        its rules each line is about); the datapoints dropped."""
        lines = []
        hosts = sorted({*configured.per_host, *self.datapoints})
        if not any(self.datapoints.get(host) for host in hosts):
            lines.append("no profile datapoints reached the rules")
        grouped: dict[str, list[str]] = {}
        for host in hosts:
            for rule, _ in configured.rules(host):
                for note in rule.notes(host):
                    grouped.setdefault(note, []).append(rule.name)
        for note, rules in grouped.items():
            lines.append(f"{note} ({', '.join(rules)})" if configured.report else note)
        if self.dropped:
            lines.append(f"{self.dropped} profile datapoints were dropped before the rules read them (the rules' "
                         "thread fell behind); the profile has them")
        return lines

    def annotate(self, doc: JobDocument) -> None:
        """After the verdicts (``rulestatus.conclude``): each profiler rule's notes in its StatusDetails."""
        by_name = {configured.setup.name: configured for configured in self.configured}
        for status in doc.get("ProfilerRuleEvaluationStatuses") or []:
            configured = by_name.get(status["RuleConfigurationName"])
            if configured is None or configured.failed or status["RuleEvaluationStatus"] not in (
                    "NoIssuesFound", "IssuesFound"):
                continue
            lines = self.notes(configured)
            if lines:
                _add_details(status, lines)

    def has_report(self) -> bool:
        """Whether a ProfilerReport (one whose evaluation did not fail) is to write the report."""
        return any(c.report and not c.failed for c in self.configured)

    def write_report(self, store: Store, job_name: str, write: ReportWriter | None) -> None:
        """ProfilerReport's profiling report (by ``write``, the report's own writer, given from
        above), once the rules have concluded; where it is (or why it is not) goes into
        ProfilerReport's StatusDetails. Never raises."""
        names = [c.setup.name for c in self.configured if c.report and not c.failed]
        if not names:
            return
        try:
            if write is None:
                raise LookupError("this supervisor was given no report writer")
            line = f"Profiling report: {write(store, job_name)}"
        except Exception as exc:  # missing or failing: told, never the job's problem
            line = f"The profiling report was not written: {type(exc).__name__}: {exc}"

        def mutate(row: JobRow) -> None:
            for status in row.doc.get("ProfilerRuleEvaluationStatuses") or []:
                if status["RuleConfigurationName"] in names:
                    _add_details(status, [line], first=True)

        try:
            store.update_job(job_name, mutate)
        except Exception as exc:
            print(f"trainmon: warning: rules: {line}; it could not be recorded: {exc}", file=sys.stderr)


def _add_details(status: Any, lines: list[str], *, first: bool = False) -> None:
    """Lines added to a status's StatusDetails (``first``: before the notes, after what it found),
    within SageMaker's length: what comes last is cut first."""
    kept = status["StatusDetails"].split("\n") if status.get("StatusDetails") else []
    head = 2 if kept and kept[0].startswith("RuleEvaluationConditionMet") else 0
    kept = [*kept[:head], *lines, *kept[head:]] if first else [*kept, *lines]
    details = "\n".join(kept)
    if len(details) > MAX_DETAILS_CHARS:
        details = details[:MAX_DETAILS_CHARS - 1] + "…"
    status["StatusDetails"] = details
