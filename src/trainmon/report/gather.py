"""What a report shows, read once: the job, its rules and findings, its metrics, its hosts' readings.

Everything comes through the operations layer and the read layer, as any reader gets it: the job
and its rules as ListRuleFindings answers them (statuses as DescribeTrainingJob gives them, every
parameter with its default), each metric's points as columns (:mod:`trainmon.read.series`), the
hosts' system readings from the profile (:mod:`.sources`). The result is plain values, which :mod:`.page` turns into HTML.

What is read is bounded by a :class:`Budget` (the report runs inside the job's supervisor at its
end, however long the job ran): the profile's earliest rows up to ``profile_rows``, and each
metric's earliest points up to its share of ``metric_points``. What it left out is in
:attr:`JobData.left_out`, which the page shows at its top.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import config
from ..api import sagemaker, trainmon
from ..clock import REAL_CLOCK, Clock
from ..jobs.document import JobDocument, defined_metrics
from ..jobs.status import TERMINAL, profiler_settings
from ..read.series import job_metrics
from ..store import Store
from . import analysis, sources
from .analysis import Columns, Phases
from .sources import HostReadings, ProfileRead, read_profile, read_system_metrics
from .text import clock as clock_text

BOTTLENECK_DEFAULTS = {("CPUBottleneck", "cpu_threshold"): 90.0, ("CPUBottleneck", "gpu_threshold"): 10.0,
                       ("IOBottleneck", "io_threshold"): 50.0, ("IOBottleneck", "gpu_threshold"): 10.0}
"""Debugger's defaults for when a CPU (or an I/O) bottleneck holds (§8 of the AWS notes), used
unless the job's CPUBottleneck, IOBottleneck or ProfilerReport configuration sets its own."""


@dataclass(frozen=True)
class Budget:
    """The most a report reads: the profile's rows (all hosts together; about 16 bytes each in
    memory) and the job's metric points (all metrics together, shared evenly among them)."""

    profile_rows: int = sources.MAX_PROFILE_ROWS
    metric_points: int = 1_000_000
    windows: int = 64  # reads of one metric's points, window by window of time, at most


BUDGET = Budget()


@dataclass(frozen=True)
class RuleView:
    """A rule configuration of the job and what it found (findings' times in epoch seconds)."""

    name: str  # RuleConfigurationName
    rule: str  # the rule it invokes
    kind: str  # Debug or Profiler
    status: str
    details: str
    count: int
    parameters: dict[str, Any]
    findings: list[dict[str, Any]]


@dataclass
class JobData:
    """Everything the report shows, read."""

    name: str
    status: str  # TrainingJobStatus (SecondaryStatus in ``secondary``)
    secondary: str
    running: bool
    generated_s: float
    phases: Phases
    failure: str | None
    hosts: list[str]
    interval_ms: int | None  # the profiler's, or None: not profiled
    profile_error: str | None  # why the profile could not be read, if it could not
    readings: dict[str, HostReadings]
    metrics: dict[str, dict[str, Columns]]  # metric -> host -> columns
    step_metric: str | None
    steps: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # host -> step_intervals
    rules: list[RuleView]
    tensors: dict[tuple[str, str], Columns]  # (host, tensor) -> the reduction its rule watched, per record
    location: str  # the profile location (where the report goes), or <home>/profiles
    thresholds: dict[tuple[str, str], float] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)  # what the budget left out, in words


def gather(store: Store, job_name: str, clock: Clock = REAL_CLOCK, budget: Budget = BUDGET) -> JobData:
    row = sagemaker.job(store, job_name)
    doc = row.doc
    now_s = clock.wall()
    running = row.status not in TERMINAL
    findings = trainmon.list_rule_findings(store, TrainingJobName=row.name)
    rules = _rules(findings)
    hosts = sorted({s.host for s in store.streams(row.id)}, key=_host_order)
    start_s = doc.get("TrainingStartTime", doc["CreationTime"])
    end_s = now_s if running else doc.get("TrainingEndTime", doc["LastModifiedTime"])
    left_out: list[str] = []
    metrics = _metrics(store, row.id, budget, (int(start_s * 1000), int(end_s * 1000)), left_out)
    names = defined_metrics(doc)
    preferred = [str(r.parameters["step_metric"]) for r in rules if r.parameters.get("step_metric")]
    step = analysis.step_metric([n for n in names if n in metrics] or names, preferred)
    steps = {host: analysis.step_intervals(*columns) for host, columns in metrics.get(step or "", {}).items()}
    first_s, last_s = _loop(metrics, step)
    settings = profiler_settings(doc)
    readings: dict[str, HostReadings] = {}
    profile_error = None
    if settings is not None:
        try:
            read = read_profile(settings["S3OutputPath"], row.name, budget.profile_rows)
            readings, unreadable = read.readings, read.unreadable
            left_out += _profile_left_out(read, budget)
            if unreadable:
                profile_error = (f"{len(unreadable)} profile file{'s' if len(unreadable) > 1 else ''} could not be "
                                 f"read and {'are' if len(unreadable) > 1 else 'is'} left out: {unreadable[0]}"
                                 + (", ..." if len(unreadable) > 1 else ""))
        except ImportError:
            profile_error = "reading the profile needs pyarrow: pip install 'trainmon[profiler]'"
        except Exception as exc:  # an unreachable bucket: the rest of the report still stands
            profile_error = f"the profile at {settings['S3OutputPath']} could not be read: {exc}"
    if not readings:
        readings = read_system_metrics(store, row.name)
    hosts = sorted(set(hosts) | set(readings), key=_host_order)
    return JobData(
        name=row.name, status=row.status, secondary=doc["SecondaryStatus"], running=running, generated_s=now_s,
        phases=analysis.phases(start_s, end_s, first_s, last_s, running), failure=doc.get("FailureReason"),
        hosts=hosts, interval_ms=settings.get("ProfilingIntervalInMilliseconds") if settings else None,
        profile_error=profile_error, readings=readings, metrics=metrics, step_metric=step, steps=steps,
        rules=rules, tensors=_tensors(store, row.name, rules), location=report_location(store, doc),
        thresholds=_thresholds(rules), left_out=left_out)


def _profile_left_out(read: ProfileRead, budget: Budget) -> list[str]:
    """What the budget (or the profile's own oddities) left out of the profile, in words."""
    said = []
    if read.left_out:
        since = f" (from {clock_text(read.cut_s)})" if read.cut_s is not None else ""
        said.append(f"the profile's last {read.left_out:,} of {read.files:,} files{since}: the report reads at most "
                    f"{budget.profile_rows:,} profile rows and {sources.MAX_PROFILE_FILES:,} files, the earliest "
                    f"first ({read.rows:,} rows read)")
    if read.crowded:
        said.append(f"the metrics of {', '.join(read.crowded[:3])}{', ...' if len(read.crowded) > 3 else ''} after "
                    f"its first {sources.MAX_HOST_METRICS:,}")
    if read.long_names:
        said.append(f"{read.long_names:,} profile metric name{'s' if read.long_names > 1 else ''} longer than "
                    f"{sources.MAX_NAME_CHARS} characters")
    return said


def report_location(store: Store, doc: JobDocument) -> str:
    """The job's profile location, or ``<home>/profiles`` for a job that ran without the profiler."""
    settings = profiler_settings(doc)
    return settings["S3OutputPath"] if settings else str(store.home / "profiles")


def _host_order(host: str) -> tuple[int, str]:
    number = host.rpartition("-")[2]
    return (int(number) if number.isdigit() else 0, host)


def _rules(answer: dict[str, Any]) -> list[RuleView]:
    kept: dict[str, list[dict[str, Any]]] = {}
    for finding in answer["RuleFindings"]:
        kept.setdefault(finding["RuleConfigurationName"], []).append({**finding, "Time": finding["Time"].timestamp()})
    return [RuleView(rule["RuleConfigurationName"], rule["RuleName"], rule["Kind"],
                     rule.get("RuleEvaluationStatus", "InProgress"), rule.get("StatusDetails", ""),
                     rule["FindingCount"], rule["Parameters"], kept.get(rule["RuleConfigurationName"], []))
            for rule in answer["Rules"]]


def _metrics(store: Store, job_id: int, budget: Budget, span_ms: tuple[int, int],
             left_out: list[str]) -> dict[str, dict[str, Columns]]:
    """Each metric's points per host, in time order: the earliest of them, up to the metric's
    share of the budget (what is left out is said in ``left_out``)."""
    found: dict[str, dict[str, Columns]] = {}
    for name, read in job_metrics(store, job_id, budget.metric_points, span_ms, budget.windows).items():
        if read.cut_ms is not None:
            left_out.append(f"the points of the metric {name!r} after its first {read.read:,} (from "
                            f"{clock_text(read.cut_ms / 1000)}, of {read.count:,}): the report reads at most "
                            f"{budget.metric_points:,} metric points, shared among the job's metrics")
        if read.hosts:
            found[name] = read.hosts
    return found


def _loop(metrics: dict[str, dict[str, Columns]], step: str | None) -> tuple[float | None, float | None]:
    """The first and the last step (epoch s): the step metric's points, else every metric's."""
    chosen = [metrics[step]] if step in metrics else list(metrics.values())
    stamps = [columns[0] for per_host in chosen for columns in per_host.values() if len(columns[0])]
    if not stamps:
        return None, None
    return min(int(s[0]) for s in stamps) / 1000, max(int(s[-1]) for s in stamps) / 1000


def _thresholds(rules: list[RuleView]) -> dict[tuple[str, str], float]:
    """The bottleneck thresholds: the job's CPUBottleneck/IOBottleneck rules' (or ProfilerReport's
    ``<Rule>_<param>`` overrides), else Debugger's defaults."""
    found = dict(BOTTLENECK_DEFAULTS)
    for rule in rules:
        for (owner, parameter) in BOTTLENECK_DEFAULTS:
            given = rule.parameters.get(parameter) if rule.rule == owner else (
                rule.parameters.get(f"{owner}_{parameter}") if rule.rule == "ProfilerReport" else None)
            try:
                if given is not None:
                    found[(owner, parameter)] = float(given)
            except (TypeError, ValueError):
                continue
    return found


TENSOR_REDUCTIONS = {"VanishingGradient": "mean_abs", "AllZero": "zero_fraction", "UnchangedTensor": "mean",
                     "ExplodingTensor": "max", "WeightUpdateRatio": "update_ratio"}
"""The reduction of a tensor (as ``trainmon.debug`` records it) that each tensor rule's chart draws."""
MAX_TENSOR_FILE_BYTES = 64 << 20  # a larger tensor file is not read for a chart: the report stays cheap


def _tensors(store: Store, job_name: str, rules: list[RuleView]) -> dict[tuple[str, str], Columns]:
    """For each tensor a tensor rule found issues with, on its host, the reduction the rule watched
    over time, read from the host's tensor file (nothing when it is missing, too large or unreadable)."""
    wanted: dict[tuple[str, str], str] = {}
    for rule in rules:
        for finding in rule.findings:
            if isinstance(finding.get("Tensor"), str):
                wanted[(str(finding.get("Host", "")), finding["Tensor"])] = TENSOR_REDUCTIONS.get(rule.rule, "l2")
    found: dict[tuple[str, str], Columns] = {}
    if not wanted:
        return found
    from ..debug import records
    from ..runtime.contract.tensors import tensor_dir
    from ..runtime.watch.tensorfeed import TensorFile

    for host in sorted({host for host, _ in wanted}):
        try:
            path = tensor_dir(config.job_dir(store.home, job_name) / host) / records.file_name(host)
            if not path.exists() or path.stat().st_size > MAX_TENSOR_FILE_BYTES:
                continue
            read = TensorFile(path).read(to_end=True)
        except Exception:  # another process's file: a chart less, never a report less
            continue
        for (owner, name), reduction in wanted.items():
            mine = [r for r in read if owner == host and r.name == name]
            if mine:
                values = [_reduction(r, reduction) for r in mine]
                found[(host, name)] = (np.asarray([int(r.timestamp_s * 1000) for r in mine], np.int64),
                                       np.asarray([np.nan if v is None else v for v in values], np.float64))
    return found


def _reduction(record: Any, reduction: str) -> float | None:
    if reduction == "update_ratio":
        update, weight = record.update_l2, record.l2
        return None if update is None or not weight else float(update / weight)
    value = getattr(record, reduction, None)
    return None if value is None else float(value)
