"""``trainmon alarm put|list|history|delete|set-state``: CloudWatch alarms on any metric, through the
alarm operations (PutMetricAlarm, DescribeAlarms, DescribeAlarmHistory, DeleteAlarms, SetAlarmState)."""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any

from ..api import alarm_requests, alarms
from ..cloudwatch.model import JOB_NAMESPACE
from ..errors import ValidationException
from . import render
from .common import Commands, every_page, pairs, print_json, read_text, store, timestamp

_SYMBOLS = {">": "GreaterThanThreshold", ">=": "GreaterThanOrEqualToThreshold", "<": "LessThanThreshold",
            "<=": "LessThanOrEqualToThreshold"}
_SHOWN = {value: key for key, value in _SYMBOLS.items()}


def register(commands: Commands) -> None:
    alarm = commands.add("alarm", cmd_alarm, "Put, list, delete or set CloudWatch alarms on any metric (a job's "
                         "metrics and system metrics too), and show their history; they are evaluated while "
                         "`trainmon server` or a job runs.")
    actions = alarm.add_subparsers(dest="action", metavar="ACTION", required=True)

    put = actions.add_parser("put", help="create or replace an alarm (PutMetricAlarm)",
                             description="Create or replace an alarm (PutMetricAlarm): it compares a statistic of a "
                             "metric per period (or metric math) with a threshold.")
    put.add_argument("name", metavar="NAME")
    put.add_argument("--job", metavar="JOB", help="a job's metric: namespace /aws/sagemaker/TrainingJobs, dimension "
                     "TrainingJobName=JOB (with --host, a host's system metric: dimension Host=JOB/HOST)")
    put.add_argument("--host", metavar="HOST", help="with --job: the host (algo-N) whose system metric it is")
    put.add_argument("--metric", metavar="NAME", help="the metric's name (MetricName)")
    put.add_argument("--namespace", help="the metric's namespace (without --job)")
    put.add_argument("--dimensions", metavar="NAME=VALUE,...", help="the metric's dimensions (without --job)")
    put.add_argument("--statistic", metavar="STAT", help="SampleCount, Average, Sum, Minimum, Maximum or a "
                     "percentile such as p99 (default Average)")
    put.add_argument("--period", type=int, metavar="SECONDS", help="10, 20, 30 or a multiple of 60 (default 60)")
    put.add_argument("--unit", help="only datapoints put with this unit")
    put.add_argument("--metrics", metavar="JSON", help="metric math instead of --metric: the Metrics list "
                     "(GetMetricData's queries, one of them with ReturnData true) as JSON, inline or file://PATH")
    put.add_argument("--comparison", required=True, metavar="OPERATOR",
                     help="GreaterThanThreshold (or >), GreaterThanOrEqualToThreshold (>=), LessThanThreshold (<), "
                     "LessThanOrEqualToThreshold (<=)")
    put.add_argument("--threshold", type=float, required=True)
    put.add_argument("--evaluation-periods", type=int, default=1, metavar="N",
                     help="how many recent periods are evaluated (default 1)")
    put.add_argument("--datapoints-to-alarm", type=int, metavar="M",
                     help="how many of them must breach (default N)")
    put.add_argument("--treat-missing-data", choices=["missing", "ignore", "breaching", "notBreaching"],
                     help="what a period without data counts as (default missing)")
    put.add_argument("--evaluate-low-sample-count-percentile", choices=["evaluate", "ignore"])
    put.add_argument("--description")
    put.add_argument("--alarm-action", action="append", metavar="TARGET",
                     help="on entering ALARM: exec:COMMAND (the notification's JSON on its standard input) or an "
                     "http(s):// URL (POSTed the JSON); repeatable, at most 5")
    put.add_argument("--ok-action", action="append", metavar="TARGET", help="on entering OK (repeatable)")
    put.add_argument("--insufficient-data-action", action="append", metavar="TARGET",
                     help="on entering INSUFFICIENT_DATA (repeatable)")
    put.add_argument("--actions-disabled", action="store_true", help="create it with its actions disabled")

    listing = actions.add_parser("list", help="the alarms and their states (DescribeAlarms)",
                                 description="The alarms and their states (DescribeAlarms).")
    listing.add_argument("--prefix", help="only alarms whose name starts so")
    listing.add_argument("--state", choices=["OK", "ALARM", "INSUFFICIENT_DATA"])
    listing.add_argument("--json", action="store_true", help="the MetricAlarms as DescribeAlarms gives them")

    history = actions.add_parser("history", help="state changes, configuration changes and actions "
                                 "(DescribeAlarmHistory)", description="An alarm's history, or every alarm's: state "
                                 "changes, configuration changes and actions run (DescribeAlarmHistory).")
    history.add_argument("name", metavar="NAME", nargs="?")
    history.add_argument("--type", choices=["StateUpdate", "ConfigurationUpdate", "Action"])
    history.add_argument("--start", metavar="TIME", help="ISO 8601 (UTC without a zone) or epoch seconds")
    history.add_argument("--end", metavar="TIME", help="ISO 8601 (UTC without a zone) or epoch seconds")
    history.add_argument("--oldest-first", action="store_true")
    history.add_argument("--json", action="store_true", help="the AlarmHistoryItems as DescribeAlarmHistory gives "
                         "them")

    delete = actions.add_parser("delete", help="delete alarms (DeleteAlarms); their history stays",
                                description="Delete alarms (DeleteAlarms); their history stays.")
    delete.add_argument("names", metavar="NAME", nargs="+")

    state = actions.add_parser("set-state", help="set an alarm's state until its next evaluation (SetAlarmState)",
                               description="Set an alarm's state until its next evaluation (SetAlarmState); a "
                               "change of state runs the actions of the new state, so this tests them.")
    state.add_argument("name", metavar="NAME")
    state.add_argument("--state", required=True, choices=["OK", "ALARM", "INSUFFICIENT_DATA"])
    state.add_argument("--reason", required=True, help="StateReason")
    state.add_argument("--reason-data", metavar="JSON", help="StateReasonData: JSON text")


def cmd_alarm(args: argparse.Namespace) -> int:
    handler = {"put": _put, "list": _list, "history": _history, "delete": _delete, "set-state": _set_state}
    return handler[args.action](args)


def _put(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {
        "AlarmName": args.name, "ComparisonOperator": _SYMBOLS.get(args.comparison, args.comparison),
        "Threshold": args.threshold, "EvaluationPeriods": args.evaluation_periods,
        "DatapointsToAlarm": args.datapoints_to_alarm, "TreatMissingData": args.treat_missing_data,
        "EvaluateLowSampleCountPercentile": args.evaluate_low_sample_count_percentile,
        "AlarmDescription": args.description, "ActionsEnabled": not args.actions_disabled,
        "AlarmActions": args.alarm_action, "OKActions": args.ok_action,
        "InsufficientDataActions": args.insufficient_data_action,
    }
    if args.metrics is not None:
        given = [flag for flag, value in (("--metric", args.metric), ("--job", args.job), ("--statistic",
                 args.statistic), ("--period", args.period), ("--unit", args.unit), ("--namespace", args.namespace),
                 ("--dimensions", args.dimensions)) if value is not None]
        if given:
            raise ValidationException(f"--metrics gives the metrics, statistics and periods itself: drop "
                                      f"{', '.join(given)}.")
        request["Metrics"] = _metrics(args.metrics)
    else:
        request.update(_metric(args))
    alarms.put_metric_alarm(store(args), **{key: value for key, value in request.items() if value is not None})
    print(f"alarm {args.name} put; it is evaluated while `trainmon server` or a job runs "
          f"(`trainmon alarm list` shows its state)")
    return 0


def _metric(args: argparse.Namespace) -> dict[str, Any]:
    if args.metric is None:
        raise ValidationException("give --metric NAME (with --job JOB, or --namespace and --dimensions), or "
                                  "--metrics JSON for metric math.")
    if args.job is not None and (args.namespace is not None or args.dimensions is not None):
        raise ValidationException("--job sets the namespace and dimension of a job's metric: drop --namespace and "
                                  "--dimensions, or --job.")
    if args.host is not None and args.job is None:
        raise ValidationException("--host names a host of a job: add --job JOB.")
    if args.job is not None:
        dimension = ("Host", f"{args.job}/{args.host}") if args.host else ("TrainingJobName", args.job)
        namespace, dimensions = JOB_NAMESPACE, [{"Name": dimension[0], "Value": dimension[1]}]
    else:
        if args.namespace is None:
            raise ValidationException("give --namespace (or --job JOB for a job's metric).")
        namespace = args.namespace
        dimensions = [{"Name": k, "Value": v} for k, v in pairs((args.dimensions or "").split(",") if args.dimensions
                                                                 else [], "--dimensions").items()]
    statistic = args.statistic or "Average"
    found: dict[str, Any] = {"MetricName": args.metric, "Namespace": namespace, "Dimensions": dimensions,
                             "Period": args.period or 60, "Unit": args.unit}
    found["ExtendedStatistic" if statistic.startswith("p") else "Statistic"] = statistic
    return found


def _metrics(text: str) -> Any:
    if text.startswith("file://"):
        text = read_text(text[len("file://"):], "--metrics")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationException(f"--metrics is not JSON: {exc}") from None


def _list(args: argparse.Namespace) -> int:
    db = store(args)
    found = every_page(functools.partial(alarms.describe_alarms, db), "MetricAlarms", AlarmNamePrefix=args.prefix,
                       StateValue=args.state, MaxRecords=100)
    if args.json:
        print_json(found)
    elif not found:
        print("no alarms" + (" match" if args.prefix or args.state else " yet: `trainmon alarm put` makes one"))
    else:
        print(render.table(["NAME", "STATE", "SINCE", "CONDITION", "REASON"],
                           [[render.terminal_safe(a["AlarmName"]), a["StateValue"],
                             render.clock(a["StateTransitionedTimestamp"], date=True), _condition(a),
                             render.terminal_safe(a["StateReason"])] for a in found]))
    return 0


def _condition(alarm: dict[str, Any]) -> str:
    """What an alarm compares, in a few words: ``Maximum(train:loss) > 1.0, 2 of 3 x 60 s``."""
    if "Metrics" in alarm:
        returned = next(q for q in alarm["Metrics"] if q.get("ReturnData", True))
        watched = returned.get("Expression") or returned.get("Label") or returned["Id"]
    else:
        watched = f"{alarm.get('Statistic') or alarm.get('ExtendedStatistic')}({alarm['MetricName']})"
    periods = alarm["EvaluationPeriods"]
    needed = alarm.get("DatapointsToAlarm", periods)
    period = alarm.get("Period") or alarm_requests.alarm_period(alarm)
    return render.terminal_safe(f"{watched} {_SHOWN[alarm['ComparisonOperator']]} "
                                f"{render.number(alarm['Threshold'])}, {needed} of {periods} x {period} s")


def _history(args: argparse.Namespace) -> int:
    db = store(args)
    items = every_page(functools.partial(alarms.describe_alarm_history, db), "AlarmHistoryItems",
                       AlarmName=args.name, HistoryItemType=args.type, StartDate=timestamp(args.start, "--start"),
                       EndDate=timestamp(args.end, "--end"),
                       ScanBy="TimestampAscending" if args.oldest_first else "TimestampDescending")
    if args.json:
        print_json(items)
    elif not items:
        print("no history" + (f" for alarm {render.terminal_safe(args.name)}" if args.name else ""))
    else:
        print(render.table(["TIME", "ALARM", "TYPE", "SUMMARY"],
                           [[render.clock(item["Timestamp"], date=True), render.terminal_safe(item["AlarmName"]),
                             item["HistoryItemType"], render.terminal_safe(item["HistorySummary"])]
                            for item in items]))
    return 0


def _delete(args: argparse.Namespace) -> int:
    alarms.delete_alarms(store(args), AlarmNames=args.names)
    return 0


def _set_state(args: argparse.Namespace) -> int:
    request = {"AlarmName": args.name, "StateValue": args.state, "StateReason": args.reason}
    if args.reason_data is not None:
        request["StateReasonData"] = args.reason_data
    alarms.set_alarm_state(store(args), **request)
    from ..runtime.watch import notify

    notify.flush()  # the actions a change of state started get their chance to finish before the command exits
    return 0
