"""``trainmon metrics``, ``export``, ``profile``, ``put-metric-data`` and ``maintain``: metric data."""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from .. import units
from ..api import cloudwatch, metric_queries, sagemaker, trainmon
from ..api.times import as_datetime
from ..api.trainmon import metric_host
from ..cloudwatch.model import MetricKey, job_metric_key
from ..cloudwatch.retention import periods_text
from ..cloudwatch.statistics import Point, auto_period_s, check_period, least_period, period_table
from ..errors import CloudWatchError, InvalidParameterValue, ValidationException
from ..jobs.document import defined_metrics
from ..shapes import snake_case
from ..store import Store
from . import render
from .common import Commands, json_number, pairs, print_json, read_text, store, timestamp


def register(commands: Commands) -> None:
    metrics = commands.add("metrics", cmd_metrics, "Per-period count, average, min, max and last of a job's "
                           "metrics; CloudWatch statistics with --statistic, metric math with --math.")
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

    export = commands.add("export", cmd_export, "Write every raw point of a job, with the log record it came from.")
    export.add_argument("name")
    export.add_argument("--format", choices=["csv", "jsonl", "parquet"], default="csv")
    export.add_argument("--metric", action="append", metavar="NAME", help="only this metric (repeatable)")
    export.add_argument("--output", "-o", metavar="FILE", help="write here instead of standard output")

    prof = commands.add("profile", cmd_profile, "Summarize a job's profiler data per host: min, p50, p95, p99, max.")
    prof.add_argument("name")
    prof.add_argument("--metric", action="append", metavar="NAME", help="only this profiler metric (repeatable)")
    prof.add_argument("--json", action="store_true")

    put = commands.add("put-metric-data", cmd_put_metric_data,
                       "Publish a CloudWatch metric datapoint (PutMetricData), as `aws cloudwatch put-metric-data` "
                       "does.")
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

    maintain = commands.add("maintain", cmd_maintain, "Seal, roll up and expire metric data now (jobs' supervisors do "
                            "it every minute); the retention policy comes from TRAINMON_RETENTION, and the "
                            "store's roll-up tiers become its tiers (only this command changes them).")
    maintain.add_argument("--json", action="store_true")


# -- metrics ---------------------------------------------------------------------------------


def cmd_metrics(args: argparse.Namespace) -> int:
    db = store(args)
    job = sagemaker.describe_training_job(db, TrainingJobName=args.name)
    if args.id and not args.math:
        raise ValidationException("--id binds a metric to an Id for --math expressions: add --math, "
                                  "e.g. --id l=train:loss --math 'RATE(l)'.")
    if args.period is not None and args.period < 1:
        raise ValidationException("--period must be a positive number of seconds.")
    if args.math:
        return _metrics_math(db, job, args)
    if args.statistic:
        return _metrics_statistics(db, job, args)
    found = trainmon.get_job_metric_points(db, TrainingJobName=args.name, MetricNames=args.metric, Host=args.host,
                                           System=args.system)["Points"]
    if not found:
        defined = defined_metrics(job)
        if args.json:
            print_json([])
        else:
            hint = f"defined: {', '.join(defined)}" if defined else "the job has no metric definitions"
            print(f"no points for job {args.name} ({hint}); `trainmon describe {args.name}` shows why")
        return 0
    units = {_label(p, args.system): p.get("Unit") for p in found}
    points = [Point(_label(p, args.system), p["Timestamp"], p["Value"]) for p in found]
    period = args.period or auto_period_s(points[0].timestamp_ms, points[-1].timestamp_ms)
    rows = period_table(points, period)
    if args.json:
        print_json([
            {"MetricName": r.name, "Timestamp": as_datetime(r.start_ms / 1000),
             "Period": period, "SampleCount": r.count, "FiniteCount": r.finite, "Average": r.average,
             "Minimum": r.minimum, "Maximum": r.maximum, "Last": json_number(r.last),
             **({"Unit": units[r.name]} if units[r.name] else {})}
            for r in rows
        ])
    else:
        print(f"Job {args.name}, period {period} s")
        print(render.periods(rows, units))
    return 0


def _label(point: dict[str, Any], system: bool) -> str:
    return f"{point['MetricName']} ({point['Host']})" if system else point["MetricName"]


def _time_range(job: dict[str, Any], args: argparse.Namespace) -> tuple[float, float]:
    """--start and --end; by default the job's training time and a minute more."""
    start = timestamp(args.start, "--start") or (job.get("TrainingStartTime") or job["CreationTime"]).timestamp()
    end = timestamp(args.end, "--end") or ((job["TrainingEndTime"].timestamp() if "TrainingEndTime" in job
                                            else time.time()) + 60)
    return start, end


def _period(args: argparse.Namespace, start_s: float, end_s: float, now_s: float) -> int:
    """--period, or about 60 periods over the range (so at most 1,440 datapoints a metric), in a period
    that CloudWatch serves data of that age in."""
    if args.period is not None:
        return int(args.period)
    period = auto_period_s(int(start_s * 1000), int(end_s * 1000), rows_wanted=60)
    return max(period, least_period(now_s - start_s))


def _metrics_statistics(db: Store, job: dict[str, Any], args: argparse.Namespace) -> int:
    """CloudWatch's statistics per period (GetMetricStatistics) over the job's metrics."""
    for stat in args.statistic:
        metric_queries.check_stat(stat, "--statistic")
    plain = [s for s in args.statistic if not s.startswith("p")]
    percentiles = [s for s in args.statistic if s.startswith("p")]
    if args.system:
        keys = trainmon.system_metric_keys(db, args.name, args.host, args.metric)
    else:
        keys = [job_metric_key(args.name, name) for name in args.metric or defined_metrics(job)]
    start, end = _time_range(job, args)
    if start >= end:
        raise InvalidParameterValue("The parameter --start must be before --end.")
    period = check_period(_period(args, start, end, time.time()), "--period")
    rows: list[dict[str, Any]] = []
    for key in keys:
        label = f"{key.name} ({metric_host(key)})" if args.system else key.name
        for point in cloudwatch.metric_statistics(db, key, start, end, period, plain, percentiles):
            rows.append({"MetricName": label, "Timestamp": point["Timestamp"], "Unit": point.get("Unit"),
                         **{s: point[s] for s in plain}, **point.get("ExtendedStatistics", {})})
    if args.json:
        print_json(rows)
        return 0
    print(f"Job {args.name}, period {period} s")
    print(render.table(["METRIC", "PERIOD START", *args.statistic],
                       [[r["MetricName"], render.clock(r["Timestamp"].timestamp()),
                         *(render.quantity(r.get(s), None if s == "SampleCount" else r["Unit"])
                           for s in args.statistic)] for r in rows]))
    return 0


def _metrics_math(db: Store, job: dict[str, Any], args: argparse.Namespace) -> int:
    """Metric math over the job's metrics per period: one GetMetricData request, a result per --math."""
    from . import metric_math

    if args.statistic and len(args.statistic) > 1:
        raise ValidationException("--math takes one --statistic: the statistic of every metric the expressions "
                                  "use (default Average).")
    if args.host and not args.system:
        raise ValidationException("--host chooses a host's --system metrics; a job's own metrics are per job, "
                                  "not per host: drop --host, or add --system.")
    system = trainmon.system_metric_keys(db, args.name, args.host) if args.system else []
    offered = _system_metrics(system, args.metric) if args.system else [
        metric_math.Metric(job_metric_key(args.name, name), name, name) for name in args.metric or defined_metrics(job)]
    explicit = [_explicit_binding(db, job, args, system, text) for text in args.id or []]
    plan = metric_math.plan(offered, explicit, args.math)
    start, end = _time_range(job, args)
    period = _period(args, start, end, time.time())
    stat = args.statistic[0] if args.statistic else "Average"
    try:
        results = cloudwatch.all_metric_data(db, MetricDataQueries=plan.queries(period, stat), StartTime=start,
                                             EndTime=end, ScanBy="TimestampAscending")
    except CloudWatchError as error:
        raise plan.reworded(error) from None
    rows = [{"Label": r["Label"], "Expression": plan.math(r["Id"]).expression, "Timestamp": stamp,
             "Period": period, "Value": value}
            for r in results for stamp, value in zip(r["Timestamps"], r["Values"], strict=True)]
    if args.json:
        print_json(rows)
    elif not rows:
        print(f"no datapoints for job {args.name} from {render.clock(start, date=True)} to "
              f"{render.clock(end, date=True)}; `trainmon metrics {args.name}` shows its points")
    else:
        print(f"Job {args.name}, period {period} s, metrics as {stat}")
        print(render.table(["RESULT", "PERIOD START", "VALUE"],
                           [[r["Label"], render.clock(r["Timestamp"].timestamp()), render.number(r["Value"])]
                            for r in rows]))
    return 0


def _system_metrics(system: list[MetricKey], names: Sequence[str] | None) -> list[Any]:
    """The hosts' system metrics for --math: with several hosts, the automatic Ids name the host."""
    from . import metric_math

    keys = [key for key in system if not names or key.name in names]
    several = len({metric_host(key) for key in keys}) > 1
    return [metric_math.Metric(key, f"{key.name} ({metric_host(key)})", f"{key.name} {metric_host(key)}" if several else key.name)
            for key in keys]


def _explicit_binding(db: Store, job: dict[str, Any], args: argparse.Namespace, system: list[MetricKey],
                      text: str) -> tuple[str, Any, str]:
    """One --id ID=METRIC: the Id, the job's (or with --system, one of ``system``) metric of that name,
    the text."""
    from . import metric_math

    query_id, sep, name = text.partition("=")
    if not sep or not query_id or not name:
        raise ValidationException(f"--id {text!r} must look like ID=METRIC, e.g. --id loss=train:loss.")
    if not args.system:
        key = job_metric_key(args.name, name)
        listed = cloudwatch.list_metrics(db, Namespace=key.namespace, MetricName=name,
                                         Dimensions=[{"Name": n, "Value": v} for n, v in key.dimensions])["Metrics"]
        if name not in defined_metrics(job) and not listed:
            known = ", ".join(defined_metrics(job)) or "none: it has no metric definitions"
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
                                  f"({', '.join(metric_host(k) for k in keys)}): add --host HOST to choose one.")
    return query_id, metric_math.Metric(keys[0], f"{name} ({metric_host(keys[0])})", name), text


# -- export, profile -------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    """Every raw point of a job, each with the log record it came from."""
    found = trainmon.get_job_metric_points(store(args), TrainingJobName=args.name, MetricNames=args.metric)["Points"]
    rows: list[dict[str, Any]] = [
        {"timestamp": as_datetime(p["Timestamp"] / 1000).isoformat(timespec="milliseconds"),
         "metric_name": p["MetricName"], "value": p["Value"], "host": p["Host"], "log_stream": p["LogStreamName"],
         "record": p["Record"]}
        for p in found
    ]
    columns = ["timestamp", "metric_name", "value", "host", "log_stream", "record"]
    if args.format == "parquet":
        return _export_parquet(rows, args.output)
    out = open(args.output, "w", newline="", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    try:
        if args.format == "csv":
            writer = csv.DictWriter(out, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        else:
            out.write("".join(json.dumps({**r, "value": json_number(r["value"])}) + "\n" for r in rows))
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def _export_parquet(rows: list[dict[str, Any]], output: str | None) -> int:
    if not output:
        raise ValidationException("--format parquet needs --output FILE.")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ValidationException("Parquet export needs pyarrow: pip install 'trainmon[profiler]'") from None
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([
        ("timestamp", pa.string()), ("metric_name", pa.string()), ("value", pa.float64()),
        ("host", pa.string()), ("log_stream", pa.string()), ("record", pa.int64())])), output)
    print(f"wrote {len(rows)} points to {output}", file=sys.stderr)
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    summary = trainmon.get_profile_summary(store(args), TrainingJobName=args.name, MetricNames=args.metric)
    rows = summary["Metrics"]
    if args.json:
        print_json(rows)
    elif rows:
        print(f"Job {args.name}: profiler every {summary['IntervalMilliseconds']} ms")
        print(render.table(["HOST", "METRIC", "SAMPLES", "MIN", "P50", "P95", "P99", "MAX"],
                           [[r["host"], r["metric"], r["samples"], *(render.quantity(r[k], units.profile_unit(
                               r["metric"])) for k in ("min", "p50", "p95", "p99", "max"))] for r in rows]))
    else:
        print(f"no profiler data for job {args.name} yet")
    return 0


# -- put-metric-data, maintain ---------------------------------------------------------------


def cmd_put_metric_data(args: argparse.Namespace) -> int:
    """PutMetricData as the AWS CLI takes it: one datapoint from options, or --metric-data JSON."""
    cloudwatch.put_metric_data(store(args), Namespace=args.namespace, MetricData=_metric_data(args))
    return 0


def _metric_data(args: argparse.Namespace) -> Any:
    if args.metric_data is not None:
        if args.metric_name is not None or args.value is not None or args.statistic_values is not None:
            raise ValidationException("give either --metric-data or --metric-name with --value/--statistic-values")
        text = args.metric_data
        if text.startswith("file://"):
            text = read_text(text[len("file://"):], "--metric-data")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationException(f"--metric-data is not JSON: {exc}") from None
        return [data] if isinstance(data, dict) else data
    if args.metric_name is None:
        raise ValidationException("give --metric-name NAME with --value V (or --statistic-values), or --metric-data")
    datum: dict[str, Any] = {"MetricName": args.metric_name}
    if args.value is not None:
        datum["Value"] = args.value
    if args.statistic_values is not None:
        values = pairs(args.statistic_values.split(","), "--statistic-values")
        if not all(_is_number(v) for v in values.values()):
            raise ValidationException("--statistic-values takes numbers: SampleCount=N,Sum=S,Minimum=A,Maximum=B")
        datum["StatisticValues"] = {k: float(v) for k, v in values.items()}
    if args.unit is not None:
        datum["Unit"] = args.unit
    if args.dimensions is not None:
        datum["Dimensions"] = [{"Name": k, "Value": v}
                               for k, v in pairs(args.dimensions.split(","), "--dimensions").items()]
    if args.timestamp is not None:
        datum["Timestamp"] = timestamp(args.timestamp, "--timestamp")
    if args.storage_resolution is not None:
        datum["StorageResolution"] = args.storage_resolution
    return [datum]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def cmd_maintain(args: argparse.Namespace) -> int:
    """One maintenance pass now: seal chunks, roll up, expire what the retention policy drops."""
    done = trainmon.maintain_store(store(args))
    if args.json:
        print_json({"Retention": done.pop("Retention"),
                    **{snake_case(key): value for key, value in done.items()}})
    elif not done["Ran"]:
        print("another process is maintaining this store now; nothing done")
    else:
        print(f"retention {done['Retention']}")
        if done["RetieredSeries"]:
            print(f"the store's roll-up tiers changed from {periods_text(tuple(done['TiersBefore']))} to this "
                  f"policy's: rebuilt for {done['RetieredSeries']} metrics ({done['RetieredRows']} roll-up rows)")
        print(f"sealed {done['SealedPoints']} points into {done['SealedChunks']} chunks; rolled up "
              f"{done['RolledSeries']} metrics ({done['RollupRows']} roll-up rows); expired {done['ExpiredChunks']} "
              f"chunks and {done['ExpiredRollups']} roll-up rows")
    return 0
