"""The operations only trainmon has, in the same form as AWS's (keyword members, a response dict):

- ``DescribeJobMetrics``: per metric of a job, how many points, their range and the final value,
  what each metric definition did (matches, rejected captures and why, near misses), the
  definitions' warnings (names shared, a definition repeated, a tab), how the job ran (the command
  each host ran, the record mode), and what of the job's output could not be stored, if anything;
- ``GetJobMetricPoints``: every raw point of a job's metrics with the log record it came from,
  or the raw datapoints of the job's system metrics;
- ``ListJobSystemMetrics``: the CPU, memory, disk and GPU metrics recorded for a job's hosts;
- ``GetJobLogRecords``: a job's log records as the job printed them, from where the caller left off;
- ``TestMetricDefinitions``: definitions applied to a sample of log text, before a job runs;
- ``GetProfileSummary``: a job's profiler data per host and metric (min, percentiles, max);
- ``ListRuleFindings``: a job's rules (status, parameters with their defaults, actions) and what
  they found (when, on which host, which values crossed which thresholds);
- ``MaintainStore``: one maintenance pass (seal, roll up, expire) now;
- ``ListImages``: the container images on this machine a job can run in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..cloudwatch.model import JOB_NAMESPACE, MetricKey
from ..errors import TrainmonError, ValidationException
from ..jobs import rulestatus
from ..jobs.document import defined_metrics
from ..jobs.status import TERMINAL, profiler_settings
from ..parsing.definitions import (
    MetricDefinition,
    check_definitions,
    definition_warnings,
    near_miss,
)
from ..parsing.extract import Extractor
from ..parsing.framing import Mode
from ..rules import catalog
from ..shapes import refuse_unknown
from ..store import JobRow, Store, profiles
from ..units import SYSTEM_UNITS, profile_unit
from .sagemaker import describe, each_job, job
from .times import as_datetime, as_datetimes

LOG_PAGE_RECORDS = 10_000
LOG_TEXT_RECORDS = 1_000_000
MAX_TEST_BYTES = 16 << 20


def describe_job_metrics(store: Store, *, TrainingJobName: Any = None, **unsupported: Any) -> dict[str, Any]:
    """``Metrics`` (per metric: Points, Minimum, Maximum, FinalValue and FinalTimestamp), ``Definitions``
    (each definition's diagnostics, in the order of the definitions), ``Warnings`` (what
    ``trainmon run`` warned of the definitions), ``Command`` (what each host ran), ``RecordMode`` and,
    when some output could not be stored, ``UnstoredOutput``; for a Ray job, ``HostPlacements`` (each
    host's node: Ray's node id, its address and host name); for a job run in containers, ``Image``
    (the hosts' image, ``Command`` then being its entry point and arguments); for one whose framework
    image this machine did not have, ``AbsentImage`` (that image: its hosts ran as processes); for a
    command line, ``WorkingDirectory`` (where it runs: TrainmonConfig.WorkingDirectory, or the
    directory of the process that created the job)."""
    refuse_unknown(unsupported, where="input")
    row = job(store, TrainingJobName)
    finals = {name: (value, ts / 1000) for name, value, ts in store.final_metrics(row.id)}
    return _job_metrics(store, row, finals)


def describe_with_metrics(store: Store, name: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """DescribeTrainingJob's answer and DescribeJobMetrics' for one job, read once (what ``trainmon
    describe`` shows): the final values come from the description's FinalMetricDataList."""
    return _describe_row(store, job(store, name))


def describe_several(store: Store, names: list[str]) -> list[dict[str, Any]]:
    """Of each job named, in order, ``TrainingJobName`` and :func:`describe_with_metrics`' two answers
    as ``Job`` and ``Metrics``, or as ``Error`` what a description of it answers (an invalid name, no
    such job): what Compare shows of its jobs."""
    def described(row: JobRow) -> dict[str, Any]:
        description, metrics = _describe_row(store, row)
        return {"Job": description, "Metrics": metrics}

    return each_job(store, names, described)


def _describe_row(store: Store, row: JobRow) -> tuple[dict[str, Any], dict[str, Any]]:
    description = describe(store, row)
    finals = {m["MetricName"]: (m["Value"], m["Timestamp"]) for m in description["FinalMetricDataList"]}
    return as_datetimes(description), _job_metrics(store, row, finals)


def _job_metrics(store: Store, row: JobRow, finals: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """DescribeJobMetrics' answer, given each metric's final (value, epoch seconds): the metrics in
    the order the job defines them (the one a user writes first, they watch most), then any other
    by name, as every view of them shows them."""
    metrics = []
    summaries = store.metric_summaries(row.id)
    place = {name: number for number, name in enumerate(defined_metrics(row.doc))}
    for name in sorted(summaries, key=lambda name: (place.get(name, len(place)), name)):
        points, low, high = summaries[name]
        entry: dict[str, Any] = {"MetricName": name, "Points": points, "Minimum": low, "Maximum": high}
        if name in finals:
            entry["FinalValue"], entry["FinalTimestamp"] = finals[name][0], as_datetime(finals[name][1])
        metrics.append(entry)
    settings = row.doc["TrainmonConfig"]
    definitions = [MetricDefinition(d["Name"], d["Regex"])
                   for d in row.doc["AlgorithmSpecification"].get("MetricDefinitions", [])]
    warnings = definition_warnings(definitions, escapes_control=Mode(settings["RecordMode"]).escapes)
    answer: dict[str, Any] = {"Metrics": metrics, "Definitions": row.diagnostics, "Warnings": warnings,
                              "Command": settings["Command"], "RecordMode": settings["RecordMode"]}
    if "Image" in settings:  # its hosts are containers of this image, the command their arguments
        answer["Image"] = settings["Image"]["Reference"]
        answer["Command"] = [*settings["Image"].get("Entrypoint", []), *settings["Command"]]
    if "AbsentImage" in settings:  # a framework image this machine did not have: its hosts ran as processes
        answer["AbsentImage"] = settings["AbsentImage"]
    if "Image" not in settings and "Script" not in settings:  # a command line: where it ran
        answer["WorkingDirectory"] = settings["WorkingDirectory"]
    if "UnstoredOutput" in row.doc:
        answer["UnstoredOutput"] = row.doc["UnstoredOutput"]
    if "HostPlacements" in row.doc:  # a Ray job: where each host runs
        answer["HostPlacements"] = row.doc["HostPlacements"]
    return answer


def get_job_metric_points(store: Store, *, TrainingJobName: Any = None, MetricNames: Any = None, Host: Any = None,
                          System: Any = False, **unsupported: Any) -> dict[str, Any]:
    """``Points``: MetricName, Timestamp (epoch ms), Value, Host; for a job's own metrics also
    LogStreamName and Record (1-based); with ``System``, the hosts' system metrics instead."""
    refuse_unknown(unsupported, where="input")
    row = job(store, TrainingJobName)
    names, host = _names(MetricNames), _host(Host)
    if not isinstance(System, bool):
        raise ValidationException("System must be true or false.")
    if System:
        points: list[dict[str, Any]] = []
        for key in system_metric_keys(store, row.name, host, names):
            host = metric_host(key)
            points.extend({"MetricName": key.name, "Timestamp": sample.timestamp_ms,
                           "Value": sample.sum / sample.count, "Host": host, "Unit": sample.unit}
                          for sample in store.metric_samples(key, 0, 2**62))
        points.sort(key=lambda p: p["Timestamp"])
        return {"Points": points}
    streams = {s.id: s.name for s in store.streams(row.id)}
    return {"Points": [{"MetricName": p.name, "Timestamp": p.timestamp_ms, "Value": p.value, "Host": p.host,
                        "LogStreamName": streams.get(p.stream_id, ""), "Record": p.seq + 1}
                       for p in store.points(row.id, names=names, host=host)]}


def list_job_system_metrics(store: Store, *, TrainingJobName: Any = None, Host: Any = None,
                            MetricNames: Any = None, **unsupported: Any) -> dict[str, Any]:
    """``Metrics``: each system metric of the job's hosts (CloudWatch's form, plus its Host and
    its Unit), by name and host."""
    refuse_unknown(unsupported, where="input")
    row = job(store, TrainingJobName)
    return {"Metrics": [{**key.to_api(), "Host": metric_host(key), "Unit": SYSTEM_UNITS.get(key.name, "None")}
                        for key in system_metric_keys(store, row.name, Host, _names(MetricNames))]}


def system_metric_keys(store: Store, job_name: str, host: Any = None, names: list[str] | None = None) -> list[MetricKey]:
    """The system metrics of a job's hosts (all, or only ``host``), by name and host."""
    host = _host(host)
    keys = [key for key, _ in store.metric_keys(JOB_NAMESPACE)
            if dict(key.dimensions).get("Host", "").startswith(f"{job_name}/")
            and (not names or key.name in names)
            and (not host or dict(key.dimensions)["Host"] == f"{job_name}/{host}")]
    return sorted(keys, key=lambda key: (key.name, len(metric_host(key)), metric_host(key)))


def metric_host(key: MetricKey) -> str:
    """algo-N of a system metric (dimension Host=<job>/algo-N)."""
    return dict(key.dimensions)["Host"].split("/", 1)[1]


def _host(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValidationException("Host must be a host name such as algo-1.")
    return value


def _names(value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ValidationException("MetricNames must be a list of metric names.")
    return value or None


def get_job_log_records(store: Store, *, TrainingJobName: Any = None, Host: Any = None, After: Any = None,
                        TailRecords: Any = None, Limit: Any = LOG_PAGE_RECORDS, Format: Any = "records",
                        **unsupported: Any) -> dict[str, Any]:
    """A job's log records as printed, every host's stream in turn.

    ``After`` maps a stream's name to the last record number already read (-1: none); the
    response's ``After`` says where to go on from. ``TailRecords`` starts each stream that ``After``
    does not name at its last N records. With ``Format="records"``, ``Records`` holds up to
    ``Limit`` records (Host, Record number, Timestamp in epoch ms, Message); with ``"text"``,
    ``Text`` holds per stream (Host, Records, Text) the records each followed by a newline, whole
    stored chunks up to about ``Limit`` records in all: what reading a long log back needs.
    ``TrainingJobStatus`` is the job's status when the read began, so a follower that saw a
    terminal status and then an empty page has read everything.
    """
    refuse_unknown(unsupported, where="input")
    row = job(store, TrainingJobName)
    Host = _host(Host)
    if Format not in ("records", "text"):
        raise ValidationException("Format must be records or text.")
    most = LOG_PAGE_RECORDS if Format == "records" else LOG_TEXT_RECORDS
    if not isinstance(Limit, int) or isinstance(Limit, bool) or not 1 <= Limit <= most:
        raise ValidationException(f"Limit must be from 1 to {most}.")
    if TailRecords is not None and (not isinstance(TailRecords, int) or TailRecords < 0):
        raise ValidationException("TailRecords must be a non-negative number of records.")
    if After is not None and not (isinstance(After, dict) and all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in After.items())):
        raise ValidationException("After must map log stream names to the last record number read (-1: none).")
    positions: dict[str, int] = dict(After or {})
    streams = [s for s in store.streams(row.id) if Host is None or s.host == Host]
    count = row.doc["ResourceConfig"]["InstanceCount"]
    if Host is not None and not streams and row.status in TERMINAL and Host not in {
            f"algo-{index}" for index in range(1, count + 1)}:  # a host that never ran has no records
        raise ValidationException(f"job {row.name} has no host {Host!r}; its hosts are algo-1 to algo-{count}.")
    records: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    read = 0
    for stream in streams:
        after = positions.get(stream.name)
        if after is None:
            after = max(-1, stream.records - TailRecords - 1) if TailRecords is not None else -1
        if Format == "text":
            if read < Limit:
                text, last = store.log_text(stream.id, after_seq=after, limit=Limit - read)
                if text:
                    texts.append({"Host": stream.host, "Records": last - after, "Text": text})
                    read += last - after
                after = last
        else:
            while len(records) < Limit:
                events = store.events(stream.id, after_seq=after, limit=min(5000, Limit - len(records)))
                if not events:
                    break
                records.extend({"Host": stream.host, "Record": e.seq + 1, "Timestamp": e.timestamp_ms,
                                "Message": e.message} for e in events)
                after = events[-1].seq
        positions[stream.name] = after
    answer: dict[str, Any] = {"After": positions, "TrainingJobStatus": row.status, "InstanceCount": count,
                              "Complete": (len(records) < Limit) if Format == "records" else read < Limit}
    answer["Records" if Format == "records" else "Text"] = records if Format == "records" else texts
    return answer


def dry_run_definitions(store: Store | None = None, *, MetricDefinitions: Any = None, LogText: Any = None,
                        RecordMode: Any = Mode.TERMINAL.value, **unsupported: Any) -> dict[str, Any]:
    """Definitions applied to log text, as a job would apply them: every point (Line, MetricName,
    Value, and Definition: the position of the definition that gave it, from 1), what each definition
    did (``Definitions``, in their order: a definition that matched nothing has ``NearMiss`` when the
    text nearly holds what its regex needs, one that is invalid only ``Name`` and ``Problems``), the
    ``Problems`` of the invalid ones (``Definition``: its position, ``Message``), so the others are
    tested still, and ``Warnings``, as ``trainmon run`` would give them (when none is invalid)."""
    refuse_unknown(unsupported, where="input")
    if not isinstance(RecordMode, str) or RecordMode not in {m.value for m in Mode}:
        raise ValidationException(f"RecordMode must be one of {', '.join(m.value for m in Mode)}.")
    found, problems = check_definitions(MetricDefinitions)
    if not found:
        raise ValidationException("MetricDefinitions: give at least one definition to test.")
    if any(position == 0 for position, _ in problems):
        raise ValidationException("Invalid metric definitions:\n  " + "\n  ".join(m for p, m in problems if p == 0))
    if not isinstance(LogText, str) or len(LogText.encode()) > MAX_TEST_BYTES:
        raise ValidationException(f"LogText must be text of at most {MAX_TEST_BYTES} bytes.")
    mode = Mode(RecordMode)
    tested = [(position, definition) for position, definition in enumerate(found, 1) if definition is not None]
    points: list[dict[str, Any]] = []
    stats: dict[int, dict[str, Any]] = {}
    if tested:
        extractor = Extractor([definition for _, definition in tested], mode)
        points = [{"Line": record + 1, "MetricName": tested[definition][1].name, "Value": value,
                   "Definition": tested[definition][0]}
                  for record, _offset, definition, value in extractor.scan(LogText.encode())]
        for (position, _), stat in zip(tested, extractor.stats, strict=True):
            stats[position] = stat.to_json()
            hint = near_miss(stat.literal or "", LogText) if not stat.matches and not stat.rejected else None
            if hint:
                stats[position]["NearMiss"] = hint
    definitions = [stats.get(position) or {"Name": _name_of(item), "Problems": [m for p, m in problems if p == position]}
                   for position, item in enumerate(MetricDefinitions, 1)]
    return {"Points": points, "Definitions": definitions,
            "Problems": [{"Definition": position, "Message": message} for position, message in problems],
            "Warnings": [] if problems else definition_warnings([d for _, d in tested], escapes_control=mode.escapes)}


def _name_of(item: Any) -> str:
    return item["Name"] if isinstance(item, dict) and isinstance(item.get("Name"), str) else ""


def get_profile_summary(store: Store, *, TrainingJobName: Any = None, MetricNames: Any = None,
                        **unsupported: Any) -> dict[str, Any]:
    """Per host and profiler metric: Samples, Minimum, p50, p95, p99, Maximum, and its unit."""
    refuse_unknown(unsupported, where="input")
    row = job(store, TrainingJobName)
    settings = profiler_settings(row.doc)
    if settings is None:
        raise ValidationException(f"job {row.name} ran without the profiler; run with --profiling-interval-ms "
                                  "(ProfilerConfig) to get one.")
    try:
        rows = profiles.Profile(row.name, settings["S3OutputPath"]).summary()
    except ImportError:
        raise ValidationException("reading profiles needs pyarrow and pandas: pip install 'trainmon[profiler]'") from None
    names = _names(MetricNames)
    return {"IntervalMilliseconds": settings.get("ProfilingIntervalInMilliseconds"),
            "Metrics": [{**r, "unit": profile_unit(r["metric"]) or "None"} for r in rows
                        if not names or r["metric"] in names]}


def list_rule_findings(store: Store, *, TrainingJobName: Any = None, RuleConfigurationName: Any = None,
                       **unsupported: Any) -> dict[str, Any]:
    """``Rules``: each rule configuration of the job (or only ``RuleConfigurationName``) with its
    RuleName (``rule_to_invoke``), Kind (``Debug`` or ``Profiler``), RuleEvaluationStatus,
    StatusDetails, LastModifiedTime, FindingCount, Parameters (every one, given or default, the
    metrics it reads resolved) and Actions; ``RuleFindings``: the findings kept (per rule the first
    and the latest, see trainmon.jobs.rulestatus), oldest first, each with RuleConfigurationName,
    RuleName, Host, Time, Step and Metric (where they apply), Values, Thresholds, Message and Actions."""
    refuse_unknown(unsupported, where="input")
    if RuleConfigurationName is not None and not isinstance(RuleConfigurationName, str):
        raise ValidationException("RuleConfigurationName must be the name of one of the job's rule configurations.")
    row = job(store, TrainingJobName)
    described = describe(store, row)
    statuses = {s["RuleConfigurationName"]: s for s in rulestatus.all_statuses(described)}
    kept = row.doc.get("RuleFindings", {})
    rules = []
    for kind, setup in catalog.setups(row.doc):
        if RuleConfigurationName is not None and setup.name != RuleConfigurationName:
            continue
        status = statuses.get(setup.name)
        entry: dict[str, Any] = {
            "RuleConfigurationName": setup.name, "RuleName": setup.rule,
            "Kind": "Profiler" if kind == catalog.PROFILER else "Debug",
            "FindingCount": kept[setup.name]["Count"] if setup.name in kept else 0, "Parameters": setup.parameters,
            "Actions": (["StopTraining"] if setup.stop_training else []) + [f"Notify {t}" for t in setup.notify]}
        if status is not None:
            entry.update({"RuleEvaluationStatus": status["RuleEvaluationStatus"],
                          "LastModifiedTime": as_datetime(status["LastModifiedTime"])})
            if "StatusDetails" in status:
                entry["StatusDetails"] = status["StatusDetails"]
        rules.append(entry)
    if RuleConfigurationName is not None and not rules:
        names = ", ".join(s.name for _, s in catalog.setups(row.doc)) or "it has none"
        raise ValidationException(f"job {row.name} has no rule configuration {RuleConfigurationName!r} ({names}).")
    wanted = {rule["RuleConfigurationName"] for rule in rules}
    findings = sorted((f for name, entry in kept.items() if name in wanted for f in entry["Findings"]),
                      key=lambda f: f["Time"])
    return {"Rules": rules, "RuleFindings": [{**f, "Time": as_datetime(f["Time"])} for f in findings]}


def maintain_store(store: Store, **unsupported: Any) -> dict[str, Any]:
    """Seal, roll up and expire now, the store's roll-up tiers brought to this process's policy
    first; ``Ran`` is false when another process was at it."""
    refuse_unknown(unsupported, where="input")
    done = store.maintain(retier=True)
    return {"Retention": store.retention.describe(),
            **{"".join(part.title() for part in k.split("_")): v for k, v in dataclasses.asdict(done).items()}}


def list_images(store: Store | None = None, **unsupported: Any) -> dict[str, Any]:
    """The container images on this machine a job can run in (``TrainingImage``): ``Engine`` (podman
    or docker) and ``Images`` (``Name``, ``Id``, ``Size``, ``Created``, as the engine words them)."""
    refuse_unknown(unsupported, where="input")
    from ..runtime.containers import engine

    try:
        found = engine.find()
        images = found.images()
    except engine.EngineError as exc:
        raise TrainmonError(str(exc), code="EngineUnavailable") from None
    return {"Engine": found.name,
            "Images": [{"Name": i.name, "Id": i.id, "Size": i.size, "Created": i.created} for i in images]}


OPERATIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "DescribeJobMetrics": describe_job_metrics,
    "GetJobMetricPoints": get_job_metric_points,
    "ListJobSystemMetrics": list_job_system_metrics,
    "GetJobLogRecords": get_job_log_records,
    "TestMetricDefinitions": dry_run_definitions,
    "GetProfileSummary": get_profile_summary,
    "ListRuleFindings": list_rule_findings,
    "MaintainStore": maintain_store,
    "ListImages": list_images,
}
