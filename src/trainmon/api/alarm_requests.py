"""PutMetricAlarm's request checked as CloudWatch checks it, with its codes and its message forms;
and the checks the other alarm operations share (alarm names, MaxRecords, tokens).

An alarm watches one metric (``MetricName``, ``Namespace``, ``Dimensions``, ``Statistic`` or
``ExtendedStatistic``, ``Period``, ``Unit``) or metric math (``Metrics``: GetMetricData's queries,
one of them returned), against a static threshold. What trainmon cannot do is refused by name:
anomaly detection bands, PromQL and Metrics Insights alarms, extended statistics other than
percentiles, and actions that are CloudWatch's ARNs (SNS topics, Auto Scaling policies, EC2,
Lambda, Systems Manager): an action here is a notification target of
:mod:`trainmon.runtime.watch.notify`, ``exec:<command line>`` or an ``http://``/``https://`` URL.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from typing import Any

from ..cloudwatch.alarms import ANOMALY_COMPARISONS, COMPARISONS, TREAT_MISSING
from ..cloudwatch.model import check_dimensions, check_metric_name, check_namespace, check_unit
from ..cloudwatch.statistics import STATISTICS, percentile_of
from ..errors import CloudWatchError, InvalidParameterCombination, InvalidParameterValue, MissingParameter
from .metric_queries import metric_queries

MAX_NAMES = 100
MAX_ACTIONS = 5
MAX_ALARM_METRICS = 10
MAX_TAGS = 50
DAY_S, WEEK_S = 86_400, 604_800
HIGH_RESOLUTION_PERIODS = (10, 20, 30)
EVERY_MS, HIGH_RESOLUTION_EVERY_MS = 60_000, 10_000  # CloudWatch evaluates each alarm a minute, or each 10 s
SINGLE_METRIC = ("MetricName", "Namespace", "Dimensions", "Statistic", "ExtendedStatistic", "Period", "Unit")
ACTION_LISTS = ("OKActions", "AlarmActions", "InsufficientDataActions")
_ARN_SERVICES = "SNS topics, Auto Scaling policies, EC2, Lambda, Systems Manager"


def check_put(request: Mapping[str, Any]) -> dict[str, Any]:
    """The alarm's configuration: PutMetricAlarm's members as given (None left out), each checked."""
    config = {name: value for name, value in request.items() if value is not None}
    check_alarm_name(config.get("AlarmName"), "AlarmName")
    _refuse_unsupported(config)
    description = config.get("AlarmDescription")
    if description is not None and (not isinstance(description, str) or len(description) > 1024):
        raise InvalidParameterValue("The parameter AlarmDescription must be text of at most 1024 characters.")
    if not isinstance(config.get("ActionsEnabled", True), bool):
        raise InvalidParameterValue("The parameter ActionsEnabled must be true or false.")
    for field in ACTION_LISTS:
        _check_actions(config.get(field, []), field)
    if "Metrics" in config:
        given = [name for name in SINGLE_METRIC if name in config]
        if given:
            raise InvalidParameterCombination(
                f"The parameter Metrics cannot be used with {', '.join(given)}: an alarm on metric math gives its "
                "metrics, statistics and periods in Metrics."
            )
        period = _check_metrics(config["Metrics"])
        config["Metrics"] = [{**query, "ReturnData": query.get("ReturnData", True)} for query in config["Metrics"]]
    elif "MetricName" in config:
        period = _check_single_metric(config)
    else:
        raise MissingParameter("The parameter MetricName or Metrics is required: an alarm watches one metric "
                               "(MetricName, Namespace, Statistic or ExtendedStatistic, Period) or metric math "
                               "(Metrics).")
    periods = _positive(config.get("EvaluationPeriods"), "EvaluationPeriods")
    _check_span(period, periods)
    if "DatapointsToAlarm" in config:
        needed = _positive(config["DatapointsToAlarm"], "DatapointsToAlarm")
        if needed > periods:
            raise InvalidParameterValue(f"The value {needed} for parameter DatapointsToAlarm must not be greater "
                                        f"than EvaluationPeriods ({periods}).")
    config["Threshold"] = _threshold(config.get("Threshold"))
    _check_comparison(config.get("ComparisonOperator"))
    _one_of(config.get("TreatMissingData"), "TreatMissingData", TREAT_MISSING)
    _one_of(config.get("EvaluateLowSampleCountPercentile"), "EvaluateLowSampleCountPercentile", ("evaluate", "ignore"))
    _check_tags(config.get("Tags", []))
    return config


def alarm_period(config: Mapping[str, Any]) -> int:
    """The period an alarm's datapoints are computed in: its Period, or that of its Metrics' metrics."""
    if "Period" in config:
        return int(config["Period"])
    periods = [query["MetricStat"]["Period"] for query in config["Metrics"] if "MetricStat" in query]
    if periods:
        return int(periods[0])
    return int(next(query["Period"] for query in config["Metrics"] if query.get("ReturnData", True)))


def every_ms(config: Mapping[str, Any]) -> int:
    """How often the alarm is evaluated: each 10 s for a high-resolution period, else each minute."""
    return HIGH_RESOLUTION_EVERY_MS if alarm_period(config) < 60 else EVERY_MS


def check_alarm_name(value: Any, field: str) -> str:
    if value is None:
        raise MissingParameter(f"The parameter {field} is required.")
    if not isinstance(value, str) or not 1 <= len(value) <= 255 or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidParameterValue(f"The parameter {field} must be 1 to 255 characters, none of them an ASCII "
                                    "control character.")
    return value


def check_names(value: Any, field: str = "AlarmNames", *, required: bool = True) -> list[str]:
    if value is None:
        if required:
            raise MissingParameter(f"The parameter {field} is required.")
        return []
    if not isinstance(value, list) or len(value) > MAX_NAMES:
        raise InvalidParameterValue(f"The collection {field} must be a list of at most {MAX_NAMES} alarm names.")
    return [check_alarm_name(name, f"{field}.member.{position}") for position, name in enumerate(value, 1)]


def max_records(value: Any, default: int) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 100:
        raise InvalidParameterValue("The parameter MaxRecords must be an integer from 1 to 100.")
    return value


def one_of(value: Any, field: str, allowed: tuple[str, ...]) -> str | None:
    return _one_of(value, field, allowed)


def token(cursor: Any, fingerprint: str) -> str:
    """A NextToken: where the page ended, bound to the request that asked for it."""
    raw = json.dumps({"c": cursor, "r": fingerprint}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def cursor(value: Any, fingerprint: str) -> Any:
    """The cursor of a NextToken from :func:`token` (InvalidNextToken for any other)."""
    try:
        data = json.loads(base64.urlsafe_b64decode(value.encode()))
        if data["r"] == fingerprint:
            return data["c"]
    except (AttributeError, ValueError, TypeError, KeyError):
        pass
    raise CloudWatchError("The next token specified is invalid.", code="InvalidNextToken")


def fingerprint(*parts: Any) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


# -- the parts ---------------------------------------------------------------------------------


def _refuse_unsupported(config: Mapping[str, Any]) -> None:
    if "ThresholdMetricId" in config:
        raise InvalidParameterValue("The parameter ThresholdMetricId names an anomaly detection band "
                                    "(ANOMALY_DETECTION_BAND), which trainmon does not have: give a static Threshold.")
    for field in ("EvaluationCriteria", "EvaluationInterval"):
        if field in config:
            raise InvalidParameterValue(f"The parameter {field} belongs to PromQL alarms, which trainmon does not "
                                        "have: give MetricName or Metrics, a Threshold and a ComparisonOperator.")


def _check_actions(value: Any, field: str) -> None:
    from ..runtime.watch import notify

    if not isinstance(value, list) or len(value) > MAX_ACTIONS:
        raise InvalidParameterValue(f"The collection {field} must be a list of at most {MAX_ACTIONS} actions.")
    for position, target in enumerate(value, 1):
        where = f"{field}.member.{position}"
        if not isinstance(target, str) or not 1 <= len(target) <= 1024:
            raise InvalidParameterValue(f"The parameter {where} must be 1 to 1024 characters.")
        if target.startswith("arn:"):
            raise InvalidParameterValue(
                f"The value {target} for parameter {where} is an action trainmon cannot run: CloudWatch's ARNs "
                f"({_ARN_SERVICES}) do not reach this machine. Use exec:<command line> (the notification's JSON "
                "on its standard input) or an http:// or https:// URL (the notification POSTed as JSON)."
            )
        problem = notify.check_target(target)
        if problem is not None:
            raise InvalidParameterValue(f"The value {target} for parameter {where} is not a valid action: {problem}.")


def _check_single_metric(config: dict[str, Any]) -> int:
    check_namespace(config.get("Namespace"))
    check_metric_name(config.get("MetricName"))
    dimensions = check_dimensions(config.get("Dimensions"), "Dimensions")
    config["Dimensions"] = [{"Name": name, "Value": value} for name, value in dimensions]
    statistic, extended = config.get("Statistic"), config.get("ExtendedStatistic")
    if statistic is not None and extended is not None:
        raise InvalidParameterCombination("The parameters Statistic and ExtendedStatistic are mutually exclusive: "
                                          "give one of them.")
    if statistic is None and extended is None:
        raise MissingParameter("The parameter Statistic or ExtendedStatistic is required.")
    if statistic is not None and statistic not in STATISTICS:
        raise InvalidParameterValue(f"The value {statistic} for parameter Statistic is not valid: use SampleCount, "
                                    "Average, Sum, Minimum or Maximum (a percentile goes in ExtendedStatistic).")
    if extended is not None:
        try:
            percentile_of(extended if isinstance(extended, str) else "")
        except InvalidParameterValue:
            raise InvalidParameterValue(
                f"The value {extended} for parameter ExtendedStatistic is not one trainmon computes: use a percentile "
                "from p0.0 to p100 (e.g. p99); trimmed means and the other extended statistics are not implemented."
            ) from None
    if "Unit" in config:
        check_unit(config["Unit"], "Unit")
    if "Period" not in config:
        raise MissingParameter("The parameter Period is required.")
    return _period(config["Period"], "Period")


def _check_metrics(value: Any) -> int:
    """Metrics as GetMetricData's queries, with an alarm's rules: one returned, at most 10 metrics,
    all of one period."""
    try:
        queries, _order = metric_queries(value)
    except (InvalidParameterValue, MissingParameter, InvalidParameterCombination) as error:
        raise type(error)(error.message.replace("MetricDataQueries", "Metrics")) from None
    returned = [query for query in queries if query.return_data]
    if len(returned) != 1:
        raise InvalidParameterValue("Exactly one element of the metrics list should return data: set ReturnData to "
                                    f"false on all but the one the alarm watches ({len(returned)} return data).")
    stats = [(position, query.metric) for position, query in enumerate(queries, 1) if query.metric is not None]
    if len(stats) > MAX_ALARM_METRICS:
        raise InvalidParameterValue(f"An alarm's metric math uses at most {MAX_ALARM_METRICS} metrics; Metrics has "
                                    f"{len(stats)} MetricStat queries.")
    for position, stat in stats:
        _period(stat.period, f"Metrics.member.{position}.MetricStat.Period")
    periods = sorted({stat.period for _, stat in stats})
    if len(periods) > 1:
        raise InvalidParameterValue("Every metric of an alarm's Metrics must have the same period; these have "
                                    f"{', '.join(map(str, periods))}.")
    if periods:
        return periods[0]
    own = returned[0].expression.period if returned[0].expression is not None else None
    if own is None:
        raise MissingParameter("The parameter Metrics needs a MetricStat, or a Period on the expression it returns.")
    return _period(own, "Metrics.Period")


def _period(value: Any, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not (
            value in HIGH_RESOLUTION_PERIODS or (value >= 60 and value % 60 == 0)):
        raise InvalidParameterValue(f"The value {value} for parameter {field} is not valid: an alarm's period is "
                                    "10, 20 or 30 seconds (high resolution) or a multiple of 60.")
    return value


def _positive(value: Any, field: str) -> int:
    if value is None:
        raise MissingParameter(f"The parameter {field} is required.")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidParameterValue(f"The parameter {field} must be a positive integer.")
    return value


def _check_span(period: int, periods: int) -> None:
    """Period x EvaluationPeriods: at most a day, or a week for periods of an hour or more."""
    limit = WEEK_S if period >= 3600 else DAY_S
    if period * periods > limit:
        scope = "a week" if limit == WEEK_S else "a day"
        raise InvalidParameterValue(f"Metrics cannot be checked across more than {scope} "
                                    f"(EvaluationPeriods * Period must be <= {limit}).")


def _threshold(value: Any) -> float:
    if value is None:
        raise MissingParameter("The parameter Threshold is required.")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidParameterValue("The parameter Threshold must be a finite number.")
    return float(value)


def _check_comparison(value: Any) -> None:
    if value is None:
        raise MissingParameter("The parameter ComparisonOperator is required.")
    static = ", ".join(COMPARISONS)
    if value in ANOMALY_COMPARISONS:
        raise InvalidParameterValue(f"The value {value} for parameter ComparisonOperator compares with an anomaly "
                                    f"detection band, which trainmon does not have: use {static}.")
    if value not in COMPARISONS:
        raise InvalidParameterValue(f"The value {value} for parameter ComparisonOperator is not valid: use {static}.")


def _one_of(value: Any, field: str, allowed: tuple[str, ...]) -> str | None:
    if value is not None and value not in allowed:
        raise InvalidParameterValue(f"The value {value} for parameter {field} is not valid: use "
                                    f"{', '.join(allowed[:-1])} or {allowed[-1]}.")
    return None if value is None else str(value)


def _check_tags(value: Any) -> None:
    if not isinstance(value, list) or len(value) > MAX_TAGS:
        raise InvalidParameterValue(f"The collection Tags must be a list of at most {MAX_TAGS} tags.")
    for position, tag in enumerate(value, 1):
        where = f"Tags.member.{position}"
        key = tag.get("Key") if isinstance(tag, dict) else None
        text = tag.get("Value") if isinstance(tag, dict) else None
        if key is None or text is None:
            raise MissingParameter(f"The parameter {where}.{'Key' if key is None else 'Value'} is required.")
        if not isinstance(key, str) or not 1 <= len(key) <= 128:
            raise InvalidParameterValue(f"The parameter {where}.Key must be 1 to 128 characters.")
        if not isinstance(text, str) or len(text) > 256:
            raise InvalidParameterValue(f"The parameter {where}.Value must be at most 256 characters.")
