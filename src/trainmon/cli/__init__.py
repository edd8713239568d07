"""The ``trainmon`` command: parse, call, print.

Errors print one line that says what went wrong and what to do next; the exit status is 2 for
invalid input, 1 for other failures (and for a job that Failed), 3 for a job that was Stopped.
``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import jobs
from ..cloudwatch.model import JOB_NAMESPACE, MetricKey, epoch_seconds, job_metric_key
from ..cloudwatch.statistics import auto_period_s, check_period, least_period, period_table
from ..errors import CloudWatchError, InvalidParameterValue, TrainmonError, ValidationException
from ..parsing.definitions import definition_warnings, load_definitions, parse_short_form, validate_definitions
from ..parsing.extract import DefinitionStats, Extractor, scan_file, scan_stream
from ..parsing.framing import Mode
from ..sdk.clients import SageMakerClient, with_datetimes
from ..store import JobRow, PointRow, Store, open_store, profiles
from . import render

if TYPE_CHECKING:
    from ..api.cloudwatch import CloudWatchClient
    from . import metric_math

EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 1, 2, 3


# -- helpers -------------------------------------------------------------------------------


def _store(args: argparse.Namespace) -> Store:
    return open_store(args.home)


def _definitions(args: argparse.Namespace) -> list[dict[str, Any]]:
    return load_definitions(args.metric_definitions) + parse_short_form(args.metric or [])


def _pairs(items: Sequence[str] | None, flag: str) -> dict[str, str]:
    result = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValidationException(f"{flag} {item!r} must look like KEY=VALUE.")
        result[key] = value
    return result


def _hyperparameters(args: argparse.Namespace) -> dict[str, str]:
    result: dict[str, str] = {}
    if args.hyperparameters:
        text = args.hyperparameters
        if not text.lstrip().startswith("{"):
            text = _read_text(text, "--hyperparameters")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationException(f"--hyperparameters is not valid JSON: {exc.msg} at column {exc.colno}.") from None
        if not isinstance(data, dict):
            raise ValidationException("--hyperparameters must be a JSON object of names to values.")
        # SageMaker passes every value as a string; non-strings are written as JSON, as its SDK does.
        result.update({str(k): v if isinstance(v, str) else json.dumps(v) for k, v in data.items()})
    result.update(_pairs(args.hyperparameter, "-H"))
    return result


def _read_text(path: str, flag: str) -> str:
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationException(f"{flag} {path!r} is neither JSON nor a readable file: {exc.strerror or exc}.") from None


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serializable: {type(value)}")


def _json_number(value: float) -> float | str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=_json_default))


# -- commands ------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValidationException("no command to run: put it after '--', e.g. trainmon run --name my-job -- python train.py")
    name = args.name if args.name is not None else datetime.now(UTC).strftime("job-%Y%m%d-%H%M%S")
    definitions = validate_definitions(_definitions(args))
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {
            "TrainingInputMode": "File",
            "ContainerEntrypoint": command,
            "MetricDefinitions": [d.to_api() for d in definitions],
        },
        "HyperParameters": _hyperparameters(args),
        "ResourceConfig": {"InstanceType": "local", "InstanceCount": args.instance_count, "VolumeSizeInGB": 0},
        "StoppingCondition": {"MaxRuntimeInSeconds": args.max_runtime_seconds},
        "Environment": _pairs(args.environment, "--environment"),
        "InputDataConfig": [
            {"ChannelName": channel, "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": str(Path(path).expanduser().resolve()),
                "S3DataDistributionType": "FullyReplicated"}}}
            for channel, path in _pairs(args.channel, "--channel").items()
        ],
        "TrainmonConfig": {"RecordMode": args.mode, "StopGraceSeconds": args.stop_grace_seconds,
                           "SystemMetricsIntervalSeconds": args.system_metrics_interval},
    }
    if args.disable_profiler:
        request["ProfilerConfig"] = {"DisableProfiler": True}
    else:  # the flags given; jobs.build_job_doc fills in SageMaker's defaults
        given = {"ProfilingIntervalInMilliseconds": args.profiling_interval_ms, "S3OutputPath": args.profile_output}
        if any(value is not None for value in given.values()):
            request["ProfilerConfig"] = {key: value for key, value in given.items() if value is not None}
    if args.output_path:
        request["OutputDataConfig"] = {"S3OutputPath": str(Path(args.output_path).expanduser().resolve())}
    for warning in definition_warnings(definitions, escapes_control=Mode(args.mode).escapes):
        print(f"trainmon: warning: {warning}", file=sys.stderr)
    store = _store(args)
    if args.detach:
        SageMakerClient(store).create_training_job(**request)
        print(f"trainmon: job {name} started in the background; follow it with: trainmon logs {name} --follow")
        return 0
    now = time.time()
    doc = jobs.build_job_doc(request, now)
    store.create_job(name, doc, now, supervisor=jobs.supervisor_identity())
    live = sys.stdout.isatty() if args.live_metrics is None else args.live_metrics
    print(f"trainmon: job {name} started ({args.instance_count} host{'s' if args.instance_count > 1 else ''}); "
          f"stop it with Ctrl-C or `trainmon stop {name}`", file=sys.stderr)
    from ..runtime.supervisor import (
        Supervisor,  # the monitor, sampler and capture: only a command that runs a job loads them
    )

    job = Supervisor(store, name, echo=True, live_metrics=live).run()
    print()
    print(_describe_text(store, job.name))
    return {"Completed": 0, "Stopped": EXIT_STOPPED}.get(job.status, EXIT_FAILED)


def _describe_text(store: Store, name: str) -> str:
    job = jobs.get_job(store, name)
    doc = jobs.describe(store, job)
    stats = [DefinitionStats.from_json(d) for d in job.diagnostics]
    return render.describe(doc, store.metric_summaries(job.id), stats, job.doc["TrainmonConfig"].get("Command"))


def cmd_describe(args: argparse.Namespace) -> int:
    store = _store(args)
    if args.json:
        job = jobs.get_job(store, args.name)
        _print_json(with_datetimes(jobs.describe(store, job)))
    else:
        print(_describe_text(store, args.name))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    store = _store(args)
    jobs.reap_orphans(store)
    rows = store.list_jobs(status=args.status, name_contains=args.name_contains, limit=args.limit)
    if args.json:
        _print_json([{"TrainingJobName": r.name, "TrainingJobStatus": r.status,
                      "SecondaryStatus": r.doc.get("SecondaryStatus"), "CreationTime": r.creation_time} for r in rows])
    elif rows:
        print(render.job_list(rows))
    else:
        print("no training jobs" + (" match" if args.status or args.name_contains else " yet: try `trainmon demo`"))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    store = _store(args)
    job = jobs.get_job(store, args.name)
    prefix_hosts = job.doc["ResourceConfig"]["InstanceCount"] > 1 and not args.host
    positions: dict[int, int] = {}
    first = True
    while True:
        streams = [s for s in store.streams(job.id) if not args.host or s.host == args.host]
        if args.host and not streams and job.status in jobs.TERMINAL:
            raise ValidationException(f"job {args.name} has no host {args.host!r}; its hosts are algo-1 to "
                                      f"algo-{job.doc['ResourceConfig']['InstanceCount']}.")
        for stream in streams:
            after = positions.get(stream.id, -1)
            if first and args.tail is not None:
                after = max(-1, stream.records - args.tail - 1)
            while True:
                events = store.events(stream.id, after_seq=after, limit=5000)
                if not events:
                    break
                out = "".join(
                    (f"{stream.host} | " if prefix_hosts else "") + e.message + "\n" for e in events
                )
                sys.stdout.write(out)
                after = events[-1].seq
            positions[stream.id] = after
        sys.stdout.flush()
        first = False
        if not args.follow:
            return 0
        if job.status in jobs.TERMINAL:
            return 0
        time.sleep(0.25)
        job = jobs.get_job(store, args.name)  # re-read; one more pass drains what came before the end


def cmd_metrics(args: argparse.Namespace) -> int:
    store = _store(args)
    job = jobs.get_job(store, args.name)
    if args.id and not args.math:
        raise ValidationException("--id binds a metric to an Id for --math expressions: add --math, "
                                  "e.g. --id l=train:loss --math 'RATE(l)'.")
    if args.math:
        return _metrics_math(store, job, args)
    if args.statistic:
        return _metrics_statistics(store, job, args)
    points = _system_points(store, args) if args.system else store.points(job.id, names=args.metric or None, host=args.host)
    if not points:
        defined = _defined(job)
        if args.json:
            _print_json([])
        else:
            hint = f"defined: {', '.join(defined)}" if defined else "the job has no metric definitions"
            print(f"no points for job {args.name} ({hint}); `trainmon describe {args.name}` shows why")
        return 0
    if args.period is not None and args.period < 1:
        raise ValidationException("--period must be a positive number of seconds.")
    period = args.period or auto_period_s(points[0].timestamp_ms, points[-1].timestamp_ms)
    rows = period_table(points, period)
    if args.json:
        _print_json([
            {"MetricName": r.name, "Timestamp": datetime.fromtimestamp(r.start_ms / 1000, tz=UTC),
             "Period": period, "SampleCount": r.count, "FiniteCount": r.finite, "Average": r.average,
             "Minimum": r.minimum, "Maximum": r.maximum, "Last": _json_number(r.last)}
            for r in rows
        ])
    else:
        print(f"Job {args.name}, period {period} s")
        print(render.periods(rows))
    return 0


def _defined(job: JobRow) -> list[str]:
    return [d["Name"] for d in job.doc["AlgorithmSpecification"].get("MetricDefinitions", [])]


def _host(key: MetricKey) -> str:
    """algo-N of a system metric (dimension Host=<job>/algo-N)."""
    return dict(key.dimensions)["Host"].split("/", 1)[1]


def _system_keys(store: Store, job_name: str, host: str | None, names: Sequence[str] | None) -> list[MetricKey]:
    """The system metrics of the job's hosts (all, or only ``host``), by name and host."""
    keys = [key for key, _ in store.metric_keys(JOB_NAMESPACE)
            if dict(key.dimensions).get("Host", "").startswith(f"{job_name}/")
            and (not names or key.name in names)
            and (not host or dict(key.dimensions)["Host"] == f"{job_name}/{host}")]
    return sorted(keys, key=lambda key: (key.name, len(_host(key)), _host(key)))


def _time_range(job: JobRow, args: argparse.Namespace) -> tuple[float, float]:
    """--start and --end; by default the job's training time and a minute more."""
    start = _timestamp(args.start, "--start") or job.doc.get("TrainingStartTime") or job.creation_time
    end = _timestamp(args.end, "--end") or (job.doc.get("TrainingEndTime") or time.time()) + 60
    return start, end


def _period(args: argparse.Namespace, start_s: float, end_s: float, now_s: float) -> int:
    """--period, or about 60 periods over the range (so at most 1,440 datapoints a metric), in a period
    that CloudWatch serves data of that age in."""
    if args.period is not None:
        return int(args.period)
    period = auto_period_s(int(start_s * 1000), int(end_s * 1000), rows_wanted=60)
    return max(period, least_period(now_s - start_s))


def _timestamp(text: str | None, flag: str) -> float | None:
    if text is None:
        return None
    try:
        return float(text) if text.replace(".", "", 1).isdigit() else epoch_seconds(text, flag)  # UTC without a zone
    except InvalidParameterValue:
        raise ValidationException(f"{flag} {text!r} is neither ISO 8601 (2026-11-30T10:00:00Z; UTC when no zone is "
                                  "given) nor epoch seconds.") from None


def _metrics_statistics(store: Store, job: JobRow, args: argparse.Namespace) -> int:
    """CloudWatch's statistics per period (GetMetricStatistics) over the job's metrics."""
    from ..api.cloudwatch import CloudWatchClient, check_stat

    for stat in args.statistic:
        check_stat(stat, "--statistic")
    plain = [s for s in args.statistic if not s.startswith("p")]
    percentiles = [s for s in args.statistic if s.startswith("p")]
    if args.system:
        keys = _system_keys(store, args.name, args.host, args.metric)
    else:
        keys = [job_metric_key(args.name, name) for name in args.metric or _defined(job)]
    start, end = _time_range(job, args)
    if start >= end:
        raise InvalidParameterValue("The parameter --start must be before --end.")
    period = check_period(_period(args, start, end, time.time()), "--period")
    client = CloudWatchClient(store)
    rows: list[dict[str, Any]] = []
    for key in keys:
        label = f"{key.name} ({_host(key)})" if args.system else key.name
        for point in client.statistics(key, start, end, period, plain, percentiles):
            rows.append({"MetricName": label, "Timestamp": point["Timestamp"],
                         **{s: point[s] for s in plain}, **point.get("ExtendedStatistics", {})})
    if args.json:
        _print_json(rows)
        return 0
    print(f"Job {args.name}, period {period} s")
    print(render.table(["METRIC", "PERIOD START", *args.statistic],
                       [[r["MetricName"], render.clock(r["Timestamp"].timestamp()),
                         *(render.number(r.get(s)) for s in args.statistic)] for r in rows]))
    return 0


def _metrics_math(store: Store, job: JobRow, args: argparse.Namespace) -> int:
    """Metric math over the job's metrics per period: one GetMetricData request, a result per --math."""
    from ..api.cloudwatch import CloudWatchClient

    if args.statistic and len(args.statistic) > 1:
        raise ValidationException("--math takes one --statistic: the statistic of every metric the expressions "
                                  "use (default Average).")
    if args.host and not args.system:
        raise ValidationException("--host chooses a host's --system metrics; a job's own metrics are per job, "
                                  "not per host: drop --host, or add --system.")
    from . import metric_math

    system = _system_keys(store, args.name, args.host, None) if args.system else []
    offered = _system_metrics(system, args.metric) if args.system else [
        metric_math.Metric(job_metric_key(args.name, name), name, name) for name in args.metric or _defined(job)]
    explicit = [_explicit_binding(store, job, args, system, text) for text in args.id or []]
    plan = metric_math.plan(offered, explicit, args.math)
    start, end = _time_range(job, args)
    period = _period(args, start, end, time.time())
    stat = args.statistic[0] if args.statistic else "Average"
    request = {"MetricDataQueries": plan.queries(period, stat), "StartTime": start, "EndTime": end,
               "ScanBy": "TimestampAscending"}
    try:
        results = _metric_data(CloudWatchClient(store), request)
    except CloudWatchError as error:
        raise plan.reworded(error) from None
    rows = [{"Label": r["Label"], "Expression": plan.math(r["Id"]).expression, "Timestamp": stamp,
             "Period": period, "Value": value}
            for r in results for stamp, value in zip(r["Timestamps"], r["Values"], strict=True)]
    if args.json:
        _print_json(rows)
    elif not rows:
        print(f"no datapoints for job {args.name} from {render.clock(start, date=True)} to "
              f"{render.clock(end, date=True)}; `trainmon metrics {args.name}` shows its points")
    else:
        print(f"Job {args.name}, period {period} s, metrics as {stat}")
        print(render.table(["RESULT", "PERIOD START", "VALUE"],
                           [[r["Label"], render.clock(r["Timestamp"].timestamp()), render.number(r["Value"])]
                            for r in rows]))
    return 0


def _system_metrics(system: list[MetricKey], names: Sequence[str] | None) -> list[metric_math.Metric]:
    """The hosts' system metrics for --math: with several hosts, the automatic Ids name the host."""
    from . import metric_math

    keys = [key for key in system if not names or key.name in names]
    several = len({_host(key) for key in keys}) > 1
    return [metric_math.Metric(key, f"{key.name} ({_host(key)})", f"{key.name} {_host(key)}" if several else key.name)
            for key in keys]


def _explicit_binding(store: Store, job: JobRow, args: argparse.Namespace, system: list[MetricKey],
                      text: str) -> tuple[str, metric_math.Metric, str]:
    """One --id ID=METRIC: the Id, the job's (or with --system, one of ``system``) metric of that name,
    the text."""
    from . import metric_math

    query_id, sep, name = text.partition("=")
    if not sep or not query_id or not name:
        raise ValidationException(f"--id {text!r} must look like ID=METRIC, e.g. --id loss=train:loss.")
    if not args.system:
        key = job_metric_key(args.name, name)
        if name not in _defined(job) and key not in [k for k, _ in store.metric_keys(JOB_NAMESPACE, name)]:
            known = ", ".join(_defined(job)) or "none: it has no metric definitions"
            raise ValidationException(f"--id {text}: job {args.name} has no metric {name!r}; its metrics: {known}.")
        return query_id, metric_math.Metric(key, name, name), text
    keys = [key for key in system if key.name == name]
    if not keys:
        known = ", ".join(sorted({k.name for k in system})) or "none yet"
        where = f" on {args.host}" if args.host else ""
        raise ValidationException(f"--id {text}: job {args.name} has no system metric {name!r}{where}; "
                                  f"its system metrics: {known}.")
    if len(keys) > 1:
        raise ValidationException(f"--id {text}: {name} is measured on {len(keys)} hosts "
                                  f"({', '.join(_host(k) for k in keys)}): add --host HOST to choose one.")
    return query_id, metric_math.Metric(keys[0], f"{name} ({_host(keys[0])})", name), text


def _metric_data(client: CloudWatchClient, request: dict[str, Any]) -> list[dict[str, Any]]:
    """Every page of a GetMetricData answer (MaxDatapoints a page), as one list of results."""
    response = client.get_metric_data(**request)
    results: list[dict[str, Any]] = response["MetricDataResults"]
    while "NextToken" in response:
        response = client.get_metric_data(**request, NextToken=response["NextToken"])
        for whole, page in zip(results, response["MetricDataResults"], strict=True):
            whole["Timestamps"] += page["Timestamps"]
            whole["Values"] += page["Values"]
    return results


def _system_points(store: Store, args: argparse.Namespace) -> list[PointRow]:
    """The hosts' system metrics as points (namespace /aws/sagemaker/TrainingJobs, dimension Host)."""
    points = []
    for key in _system_keys(store, args.name, args.host, args.metric):
        host = dict(key.dimensions)["Host"]
        for sample in store.metric_samples(key, 0, 2**62):
            points.append(PointRow(f"{key.name} ({_host(key)})", sample.timestamp_ms,
                                   sample.sum / sample.count, host, 0, 0))
    return sorted(points, key=lambda p: p.timestamp_ms)


def cmd_stop(args: argparse.Namespace) -> int:
    store = _store(args)
    jobs.get_job(store, args.name)
    jobs.request_stop(store, args.name)
    if args.wait:
        while jobs.get_job(store, args.name).status not in jobs.TERMINAL:
            time.sleep(0.2)
        print(f"job {args.name}: {jobs.get_job(store, args.name).status}")
    else:
        print(f"job {args.name}: Stopping (its processes get SIGTERM, then SIGKILL after the grace period)")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    SageMakerClient(_store(args)).delete_training_job(TrainingJobName=args.name)
    print(f"job {args.name} deleted with its logs and metrics")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Every raw point of a job, each with the log record it came from."""
    import csv

    store = _store(args)
    job = jobs.get_job(store, args.name)
    streams = {s.id: s.name for s in store.streams(job.id)}
    rows: list[dict[str, Any]] = [
        {"timestamp": datetime.fromtimestamp(p.timestamp_ms / 1000, tz=UTC).isoformat(timespec="milliseconds"),
         "metric_name": p.name, "value": p.value, "host": p.host, "log_stream": streams.get(p.stream_id, ""),
         "record": p.seq + 1}
        for p in store.points(job.id, names=args.metric or None)
    ]
    columns = ["timestamp", "metric_name", "value", "host", "log_stream", "record"]
    if args.format == "parquet":
        if not args.output:
            raise ValidationException("--format parquet needs --output FILE.")
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ValidationException("Parquet export needs pyarrow: pip install 'trainmon[profiler]'") from None
        pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([
            ("timestamp", pa.string()), ("metric_name", pa.string()), ("value", pa.float64()),
            ("host", pa.string()), ("log_stream", pa.string()), ("record", pa.int64())])), args.output)
        print(f"wrote {len(rows)} points to {args.output}", file=sys.stderr)
        return 0
    out = open(args.output, "w", newline="", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    try:
        if args.format == "csv":
            writer = csv.DictWriter(out, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        else:
            out.write("".join(json.dumps({**r, "value": _json_number(r["value"])}) + "\n" for r in rows))
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def cmd_parse(args: argparse.Namespace) -> int:
    mode = Mode(args.mode)
    definitions = validate_definitions(_definitions(args))
    if not definitions:
        raise ValidationException("no metric definitions: give --metric-definitions or --metric NAME=REGEX")
    for warning in definition_warnings(definitions, escapes_control=mode.escapes):
        print(f"trainmon: warning: {warning}", file=sys.stderr)
    out = sys.stdout
    several = len(args.logs) > 1
    for path in args.logs:
        extractor = Extractor(definitions, mode)
        if several and not args.json:
            print(f"== {path}", file=out)
        if path != "-" and not os.access(path, os.R_OK):
            raise ValidationException(f"cannot read log {path!r}: it does not exist or is not readable.")
        names = [json.dumps(d.name) for d in definitions]
        file_field = f'"file": {json.dumps(path)}, ' if several else ""
        try:
            lines = []
            found = scan_stream(sys.stdin.buffer, extractor) if path == "-" else scan_file(path, extractor)
            for line, offset, name, value in found:
                if args.json:
                    number = repr(value) if value - value == 0.0 else json.dumps(_json_number(value))
                    lines.append(f'{{{file_field}"line": {line}, "offset": {offset}, '
                                 f'"name": {names[extractor.index_of[name]]}, "value": {number}}}')
                else:
                    lines.append(f"line {line}\t{name}\t{render.number(value)}")
                if len(lines) >= 4096:
                    out.write("\n".join(lines) + "\n")
                    lines.clear()
            if lines:
                out.write("\n".join(lines) + "\n")
        except OSError as exc:
            raise ValidationException(f"cannot read log {path!r}: {exc.strerror or exc}.") from None
        print(f"Summary for {path} ({mode.value} mode):", file=sys.stderr)
        print("\n".join(render.definition_report(extractor.stats, [d.to_api() for d in definitions])),
              file=sys.stderr)
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    store = _store(args)
    job = jobs.get_job(store, args.name)
    settings = jobs.profiler_settings(job.doc)
    if settings is None:
        raise ValidationException(f"job {args.name} ran without the profiler; run with --profiling-interval-ms to get one.")
    try:
        rows = profiles.Profile(args.name, settings["S3OutputPath"]).summary()
    except ImportError:
        raise ValidationException("reading profiles needs pyarrow and pandas: pip install 'trainmon[profiler]'") from None
    if args.metric:
        rows = [r for r in rows if r["metric"] in args.metric]
    if args.json:
        _print_json(rows)
    elif rows:
        print(f"Job {args.name}: profiler every {settings['ProfilingIntervalInMilliseconds']} ms")
        print(render.table(["HOST", "METRIC", "SAMPLES", "MIN", "P50", "P95", "P99", "MAX"],
                           [[r["host"], r["metric"], r["samples"], *(render.number(r[k]) for k in
                             ("min", "p50", "p95", "p99", "max"))] for r in rows]))
    else:
        print(f"no profiler data for job {args.name} yet")
    return 0


def cmd_put_metric_data(args: argparse.Namespace) -> int:
    """PutMetricData as the AWS CLI takes it: one datapoint from options, or --metric-data JSON."""
    from ..api.cloudwatch import CloudWatchClient

    if args.metric_data is not None:
        if args.metric_name is not None or args.value is not None or args.statistic_values is not None:
            raise ValidationException("give either --metric-data or --metric-name with --value/--statistic-values")
        text = args.metric_data
        if text.startswith("file://"):
            text = _read_text(text[len("file://"):], "--metric-data")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationException(f"--metric-data is not JSON: {exc}") from None
        if isinstance(data, dict):
            data = [data]
    else:
        if args.metric_name is None:
            raise ValidationException("give --metric-name NAME with --value V (or --statistic-values), or --metric-data")
        datum: dict[str, Any] = {"MetricName": args.metric_name}
        if args.value is not None:
            datum["Value"] = args.value
        if args.statistic_values is not None:
            pairs = _pairs(args.statistic_values.split(","), "--statistic-values")
            if not all(_is_number(v) for v in pairs.values()):
                raise ValidationException("--statistic-values takes numbers: SampleCount=N,Sum=S,Minimum=A,Maximum=B")
            datum["StatisticValues"] = {k: float(v) for k, v in pairs.items()}
        if args.unit is not None:
            datum["Unit"] = args.unit
        if args.dimensions is not None:
            datum["Dimensions"] = [{"Name": k, "Value": v} for k, v in _pairs(args.dimensions.split(","), "--dimensions").items()]
        if args.timestamp is not None:
            datum["Timestamp"] = _timestamp(args.timestamp, "--timestamp")
        if args.storage_resolution is not None:
            datum["StorageResolution"] = args.storage_resolution
        data = [datum]
    CloudWatchClient(_store(args)).put_metric_data(Namespace=args.namespace, MetricData=data)
    return 0


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def cmd_maintain(args: argparse.Namespace) -> int:
    """One maintenance pass now: seal chunks, roll up, expire what the retention policy drops."""
    store = _store(args)
    done = store.maintain()
    summary = {"Retention": store.retention.describe(), **dataclasses.asdict(done)}
    if args.json:
        _print_json(summary)
    elif not done.ran:
        print("another process is maintaining this store now; nothing done")
    else:
        print(f"retention {summary['Retention']}")
        print(f"sealed {done.sealed_points} points into {done.sealed_chunks} chunks; rolled up {done.rolled_series} "
              f"metrics ({done.rollup_rows} roll-up rows); expired {done.expired_chunks} chunks and "
              f"{done.expired_rollups} roll-up rows")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    return run_demo(args, cmd_run)


# -- parser --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainmon",
        description="Run training jobs, capture their logs, turn log lines into metrics with SageMaker metric "
        "definitions, and report final metrics.",
    )
    parser.add_argument("--home", type=Path, help="data directory (default: $TRAINMON_HOME or ~/.local/share/trainmon)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND", required=True)

    def add(name: str, handler: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(handler=handler)
        return command

    def add_definitions(command: argparse.ArgumentParser) -> None:
        command.add_argument("--metric-definitions", metavar="DEFS",
                             help='JSON file or inline JSON: [{"Name": "train:error", "Regex": "Train_error=(.*?);"}]')
        command.add_argument("--metric", action="append", metavar="NAME=REGEX", help="one definition (repeatable)")
        command.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.TERMINAL.value,
                             help="record splitting: terminal (\\n, \\r\\n and \\r end records; default), "
                             "sagemaker (only \\n, as SageMaker), raw (as terminal, no #011 escaping)")

    run = add("run", cmd_run, "Run a training job in the foreground, capturing its output and metrics.")
    run.add_argument("--name", help="job name, 1-63 letters, digits and hyphens (default: job-<time>)")
    add_definitions(run)
    run.add_argument("--hyperparameters", metavar="JSON", help="JSON object (or a file holding one)")
    run.add_argument("-H", "--hyperparameter", action="append", metavar="KEY=VALUE", help="one hyperparameter (repeatable)")
    run.add_argument("--channel", action="append", metavar="NAME=PATH", help="input channel (repeatable)")
    run.add_argument("--instance-count", type=int, default=1, metavar="N", help="hosts algo-1..algo-N (default 1)")
    run.add_argument("--max-runtime-seconds", type=int, default=jobs.DEFAULT_MAX_RUNTIME_S, metavar="S",
                     help="stop the job after S seconds (MaxRuntimeExceeded; default one day)")
    run.add_argument("--environment", action="append", metavar="KEY=VALUE", help="environment variable (repeatable)")
    run.add_argument("--stop-grace-seconds", type=float, default=jobs.DEFAULT_STOP_GRACE_S, metavar="S",
                     help="SIGKILL this long after SIGTERM when stopping (default 120, as SageMaker)")
    run.add_argument("--output-path", metavar="PATH", help="where model.tar.gz goes (default: <home>/output)")
    run.add_argument("--live-metrics", action=argparse.BooleanOptionalAction, default=None,
                     help="print each metric point as it is extracted (default: when stdout is a terminal)")
    run.add_argument("--detach", action="store_true", help="run in the background and return at once")
    run.add_argument("--system-metrics-interval", type=int, default=60, metavar="S",
                     help="seconds between the hosts' CPU/memory/disk/GPU metrics, 1 to 60 (default 60)")
    run.add_argument("--profiling-interval-ms", type=int, metavar="MS",
                     help="profiler interval: 100, 200, 500, 1000, 5000 or 60000 (default 500)")
    run.add_argument("--profile-output", metavar="LOCATION",
                     help="directory or URL (s3://...) for profiler data (default: <home>/profiles)")
    run.add_argument("--disable-profiler", action="store_true", help="no profiler data for this job")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")

    describe = add("describe", cmd_describe, "Show a job: status, transitions, final metrics, definition diagnostics.")
    describe.add_argument("name")
    describe.add_argument("--json", action="store_true", help="the DescribeTrainingJob document")

    listing = add("list", cmd_list, "List jobs, newest first.")
    listing.add_argument("--status", choices=["InProgress", "Completed", "Failed", "Stopping", "Stopped"])
    listing.add_argument("--name-contains", metavar="TEXT")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true")

    logs = add("logs", cmd_logs, "Print a job's log records.")
    logs.add_argument("name")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    logs.add_argument("--host", metavar="HOST", help="only this host, e.g. algo-2")
    logs.add_argument("--tail", type=int, metavar="N", help="start with the last N records of each host")

    metrics = add("metrics", cmd_metrics, "Per-period count, average, min, max and last of a job's metrics; "
                  "CloudWatch statistics with --statistic, metric math with --math.")
    metrics.add_argument("name")
    metrics.add_argument("--metric", action="append", metavar="NAME", help="only this metric (repeatable)")
    metrics.add_argument("--host", metavar="HOST")
    metrics.add_argument("--period", type=int, metavar="SECONDS", help="period length (default: chosen from the span)")
    metrics.add_argument("--statistic", action="append", metavar="STAT",
                         help="CloudWatch statistic per period (repeatable): SampleCount, Average, Sum, Minimum, "
                         "Maximum, or a percentile such as p50 or p99.9; with --math, the one statistic of the "
                         "metrics it uses (default Average)")
    metrics.add_argument("--math", action="append", metavar="EXPR",
                         help="CloudWatch metric math per period over the job's metrics (repeatable), e.g. "
                         "'validation_loss - train_loss'; NAME=EXPR names it for other --math. A metric is used "
                         "by its Id: its name, or one made of it (train:loss is train_loss, CPUUtilization is "
                         "cpu_utilization; docs/metrics.md)")
    metrics.add_argument("--id", action="append", metavar="ID=METRIC",
                         help="with --math: bind a metric to this Id instead of its automatic one (repeatable), "
                         "e.g. l=train:loss")
    metrics.add_argument("--start", metavar="TIME",
                         help="with --statistic or --math: ISO 8601 or epoch seconds (default: the job's start)")
    metrics.add_argument("--end", metavar="TIME",
                         help="with --statistic or --math: ISO 8601 or epoch seconds (default: its end + 1 min)")
    metrics.add_argument("--system", action="store_true",
                         help="the hosts' CPU, memory, disk and GPU metrics instead of the job's own")
    metrics.add_argument("--json", action="store_true")

    stop = add("stop", cmd_stop, "Stop a running job (SIGTERM, then SIGKILL after the grace period).")
    stop.add_argument("name")
    stop.add_argument("--wait", action="store_true", help="return when the job has stopped")

    delete = add("delete", cmd_delete, "Delete a finished job with its logs and metrics; frees the name.")
    delete.add_argument("name")

    export = add("export", cmd_export, "Write every raw point of a job, with the log record it came from.")
    export.add_argument("name")
    export.add_argument("--format", choices=["csv", "jsonl", "parquet"], default="csv")
    export.add_argument("--metric", action="append", metavar="NAME", help="only this metric (repeatable)")
    export.add_argument("--output", "-o", metavar="FILE", help="write here instead of standard output")

    parse = add("parse", cmd_parse, "Apply metric definitions to saved logs and print every point (test before you run).")
    add_definitions(parse)
    parse.add_argument("--json", action="store_true", help='one {"line", "offset", "name", "value"} object per line')
    parse.add_argument("logs", nargs="+", metavar="LOG", help="log files; - reads standard input")

    prof = add("profile", cmd_profile, "Summarize a job's profiler data per host: min, p50, p95, p99, max.")
    prof.add_argument("name")
    prof.add_argument("--metric", action="append", metavar="NAME", help="only this profiler metric (repeatable)")
    prof.add_argument("--json", action="store_true")

    put = add("put-metric-data", cmd_put_metric_data,
              "Publish a CloudWatch metric datapoint (PutMetricData), as `aws cloudwatch put-metric-data` does.")
    put.add_argument("--namespace", required=True)
    put.add_argument("--metric-name", metavar="NAME")
    put.add_argument("--value", type=float)
    put.add_argument("--statistic-values", metavar="SampleCount=N,Sum=S,Minimum=A,Maximum=B")
    put.add_argument("--unit", help="e.g. Seconds, Percent, Count (default None)")
    put.add_argument("--dimensions", metavar="NAME=VALUE,...")
    put.add_argument("--timestamp", metavar="TIME", help="ISO 8601 (UTC without a zone) or epoch seconds (default: now)")
    put.add_argument("--storage-resolution", type=int, choices=[1, 60], help="1 (high resolution) or 60 (default)")
    put.add_argument("--metric-data", metavar="JSON",
                     help="the MetricData list (or one datum) as JSON, inline or file://PATH, instead of the options")

    maintain = add("maintain", cmd_maintain, "Seal, roll up and expire metric data now (jobs' supervisors do it "
                   "every minute); the retention policy comes from TRAINMON_RETENTION.")
    maintain.add_argument("--json", action="store_true")

    demo = add("demo", cmd_demo, "Run the bundled demo training job with live metrics, then describe it.")
    demo.add_argument("--name", help="job name (default: demo-<time>)")
    demo.add_argument("--epochs", type=int, default=12)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.home is not None:
        args.home = args.home.expanduser().resolve()
        os.environ["TRAINMON_HOME"] = str(args.home)  # detached supervisors and defaults follow it
    try:
        return args.handler(args)
    except TrainmonError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"trainmon: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, (ValidationException, CloudWatchError)) else EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
