"""CloudWatch's metric alarms, evaluated as CloudWatch evaluates them (pure: datapoints in, a state out).

An alarm looks at the ``EvaluationPeriods`` (N) most recent periods of its metric and goes to
``ALARM`` when ``DatapointsToAlarm`` (M, default N) of them breach the threshold. It fetches a
wider *evaluation range* than N periods, N + 2 here (the range the user guide's examples use:
5 periods for N = 3), so that missing periods can be made up from older real datapoints:

- with N or more real datapoints in the range, the N most recent are evaluated and
  ``TreatMissingData`` plays no part;
- with fewer, ``breaching`` and ``notBreaching`` fill the most recent missing periods (as few as
  needed to make N) as breaching or not, and every real datapoint in the range is counted too;
- ``missing`` and ``ignore`` take the real datapoints alone: M of them breaching is ``ALARM``,
  a non-breaching one ``OK``; only breaching ones, too few for M, are ``ALARM`` when the oldest of
  them is at least M periods old (CloudWatch's rule against "premature" alarms), else not enough
  to say: ``INSUFFICIENT_DATA`` for ``missing``, the state as it is for ``ignore``; no real
  datapoint at all is the same.

This reproduces both tables of the CloudWatch User Guide ("How alarm state is evaluated when data
is missing"); ``tests/test_alarms.py`` checks every row. Reasons, reason data, history items and
the notification payload are written in the forms CloudWatch writes them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

OK, ALARM, INSUFFICIENT_DATA = "OK", "ALARM", "INSUFFICIENT_DATA"
STATES = (OK, ALARM, INSUFFICIENT_DATA)
MISSING, IGNORE, BREACHING, NOT_BREACHING = "missing", "ignore", "breaching", "notBreaching"
TREAT_MISSING = (BREACHING, NOT_BREACHING, IGNORE, MISSING)
COMPARISONS: dict[str, tuple[str, Callable[[float, float], bool]]] = {
    "GreaterThanOrEqualToThreshold": ("greater than or equal to", lambda value, threshold: value >= threshold),
    "GreaterThanThreshold": ("greater than", lambda value, threshold: value > threshold),
    "LessThanThreshold": ("less than", lambda value, threshold: value < threshold),
    "LessThanOrEqualToThreshold": ("less than or equal to", lambda value, threshold: value <= threshold),
}
ANOMALY_COMPARISONS = ("LessThanLowerOrGreaterThanUpperThreshold", "LessThanLowerThreshold",
                       "GreaterThanUpperThreshold")
HISTORY_TYPES = ("ConfigurationUpdate", "StateUpdate", "Action", "AlarmContributorStateUpdate",
                 "AlarmContributorAction")
INITIAL_REASON = "Unchecked: Initial alarm creation"
EXTRA_PERIODS = 2  # the evaluation range is N + 2 periods
REASON_CHARS, REASON_DATA_CHARS, SUMMARY_CHARS, HISTORY_DATA_CHARS = 1023, 4000, 255, 4095


@dataclass(frozen=True, slots=True)
class Rule:
    """What an alarm compares: the datapoints of its periods against a threshold."""

    comparison: str  # one of COMPARISONS
    threshold: float
    evaluation_periods: int  # N
    datapoints_to_alarm: int  # M
    treat_missing: str = MISSING

    def breaches(self, value: float) -> bool:
        return COMPARISONS[self.comparison][1](value, self.threshold)


@dataclass(frozen=True, slots=True)
class Datapoint:
    """One period of the evaluation range: its start, its value (None: missing) and sample count."""

    timestamp_ms: int
    value: float | None
    sample_count: float | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one evaluation decided. ``state`` None: the alarm keeps the state it has."""

    state: str | None
    evaluated: tuple[Datapoint, ...]  # newest first; a filled or unknown period has no value
    filled: int = 0  # missing periods filled in by TreatMissingData breaching or notBreaching
    unknown: int = 0  # for INSUFFICIENT_DATA: the periods that had no datapoint


def evaluation_range(evaluation_periods: int) -> int:
    """How many periods an alarm fetches: N and some older ones, to make up for missing ones."""
    return evaluation_periods + EXTRA_PERIODS


def evaluate(rule: Rule, periods: Sequence[Datapoint]) -> Outcome:
    """The alarm's state from the periods of its evaluation range, oldest first (see the module)."""
    n, m = rule.evaluation_periods, rule.datapoints_to_alarm
    real = [point for point in periods if point.value is not None]
    if len(real) >= n:
        return _counted(rule, real[-n:], [])
    if rule.treat_missing in (BREACHING, NOT_BREACHING):
        missing = [point for point in periods if point.value is None]
        return _counted(rule, real, missing[len(missing) - (n - len(real)):])
    keep = rule.treat_missing == IGNORE
    breaching = [point for point in real if rule.breaches(point.value)]  # type: ignore[arg-type]
    if real and (len(breaching) >= m or len(breaching) < len(real)):
        return _counted(rule, real, [])
    if breaching and len(periods) - periods.index(breaching[0]) >= m:  # the oldest breaching one is M periods old
        return Outcome(None, ()) if keep else _counted(rule, real, [], state=ALARM)
    if keep:
        return Outcome(None, ())
    unknown = [point for point in periods if point.value is None][-(n - len(real)):]
    return Outcome(INSUFFICIENT_DATA, _newest_first([*real, *unknown]), unknown=len(unknown))


def _counted(rule: Rule, real: list[Datapoint], filled: list[Datapoint], state: str | None = None) -> Outcome:
    breaching = sum(rule.breaches(point.value) for point in real if point.value is not None)
    if rule.treat_missing == BREACHING:
        breaching += len(filled)
    decided = state or (ALARM if breaching >= rule.datapoints_to_alarm else OK)
    return Outcome(decided, _newest_first([*real, *filled]), filled=len(filled))


def _newest_first(points: list[Datapoint]) -> tuple[Datapoint, ...]:
    return tuple(sorted(points, key=lambda point: point.timestamp_ms, reverse=True))


def low_sample_count(percentile: float, samples: float) -> bool:
    """Too few samples for a percentile to mean much (``EvaluateLowSampleCountPercentile``):
    fewer than 10 / (1 - p) for p in [0.5, 1), fewer than 10 / p for p in (0, 0.5)."""
    fraction = percentile / 100
    if 0.5 <= fraction < 1:
        return samples < 10 / (1 - fraction)
    if 0 < fraction < 0.5:
        return samples < 10 / fraction
    return False


# -- what CloudWatch writes ----------------------------------------------------------------------


def state_reason(rule: Rule, outcome: Outcome) -> str:
    """StateReason as CloudWatch words it ("Threshold Crossed: 2 out of the last 3 datapoints ...")."""
    if outcome.state == INSUFFICIENT_DATA:
        return f"Insufficient Data: {_count(outcome.unknown, 'datapoint')} {_was(outcome.unknown)} unknown."
    real = [point for point in outcome.evaluated if point.value is not None]
    alarm = outcome.state == ALARM
    supporting = [point for point in real if rule.breaches(point.value) == alarm]  # type: ignore[arg-type]
    shown = supporting or real
    negation = "" if shown and rule.breaches(shown[0].value) else "not "  # type: ignore[arg-type]
    condition = f"{negation}{COMPARISONS[rule.comparison][0]} the threshold ({java_double(rule.threshold)})"
    if outcome.filled:
        treated = f"{_count(outcome.filled, 'missing datapoint')} {_was(outcome.filled)} treated as " \
                  f"[{'Breaching' if rule.treat_missing == BREACHING else 'NonBreaching'}]."
        if not real:
            return f"Threshold Crossed: no datapoints were received for {_count(outcome.filled, 'period')} " \
                   f"and {treated}"
        return _fitted(lambda listed: f"Threshold Crossed: {_count(len(shown), 'datapoint')} [{listed}] "
                       f"{_was(len(shown))} {condition} and {treated}", shown)
    needed, transition = ((rule.datapoints_to_alarm, "OK -> ALARM") if alarm else
                          (rule.evaluation_periods - rule.datapoints_to_alarm + 1, "ALARM -> OK"))
    return _fitted(lambda listed: f"Threshold Crossed: {len(shown)} out of the last {len(outcome.evaluated)} "
                   f"datapoints [{listed}] {_was(len(shown))} {condition} (minimum {_count(needed, 'datapoint')} "
                   f"for {transition} transition).", shown)


def _fitted(text: Callable[[str], str], shown: list[Datapoint]) -> str:
    """The reason with as many datapoints listed as fit CloudWatch's 1,023 characters."""
    for count in range(len(shown), 0, -1):
        listed = ", ".join(f"{java_double(point.value or 0.0)} ({reason_date(point.timestamp_ms)})"
                           for point in shown[:count]) + (", ..." if count < len(shown) else "")
        reason = text(listed)
        if len(reason) <= REASON_CHARS:
            return reason
    return text("...")[:REASON_CHARS]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _was(number: int) -> str:
    return "was" if number == 1 else "were"


def state_reason_data(rule: Rule, outcome: Outcome, *, query_s: float, period: int, statistic: str | None = None,
                      extended_statistic: str | None = None, unit: str | None = None) -> str:
    """StateReasonData, the JSON CloudWatch writes beside the reason: the query's time, the
    evaluated datapoints (newest first; a filled or unknown period with its timestamp only) and
    their values (oldest first), trimmed of the oldest ones to fit 4,000 characters."""
    evaluated = list(outcome.evaluated)
    while True:
        real = [point for point in evaluated if point.value is not None]
        data: dict[str, Any] = {"version": "1.0", "queryDate": iso_ms(query_s * 1000)}
        if real:
            data["startDate"] = iso_ms(real[-1].timestamp_ms)
        for key, value in (("statistic", statistic), ("extendedStatistic", extended_statistic), ("unit", unit)):
            if value is not None:
                data[key] = value
        data.update(period=period, recentDatapoints=[point.value for point in reversed(real)],
                    threshold=rule.threshold, evaluatedDatapoints=[_evaluated(point) for point in evaluated])
        text = json.dumps(data, separators=(",", ":"))
        if len(text) <= REASON_DATA_CHARS or not evaluated:
            return text
        evaluated = evaluated[:max(1, len(evaluated) * 3 // 4)] if len(evaluated) > 1 else []


def _evaluated(point: Datapoint) -> dict[str, Any]:
    item: dict[str, Any] = {"timestamp": iso_ms(point.timestamp_ms)}
    if point.value is not None and point.sample_count is not None:
        item["sampleCount"] = point.sample_count
    if point.value is not None:
        item["value"] = point.value
    return item


@dataclass(frozen=True, slots=True)
class State:
    value: str
    reason: str
    reason_data: str | None = None


def state_update(old: State, new: State) -> tuple[str, str]:
    """A StateUpdate history item's summary and data: each state's reason data (JSON text, as
    written or as SetAlarmState checked it) goes in as the object it is."""
    data = f'{{"version":"1.0","oldState":{_state_json(old)},"newState":{_state_json(new)}}}'
    if len(data) > HISTORY_DATA_CHARS:  # without the reason data, which the states keep
        data = _bounded({"version": "1.0", "oldState": {"stateValue": old.value, "stateReason": old.reason},
                         "newState": {"stateValue": new.value, "stateReason": new.reason}})
    return f"Alarm updated from {old.value} to {new.value}", data


def _state_json(state: State) -> str:
    text = json.dumps({"stateValue": state.value, "stateReason": state.reason}, separators=(",", ":"))
    return f'{text[:-1]},"stateReasonData":{state.reason_data}}}' if state.reason_data else text


def configuration_update(kind: str, name: str, before: Mapping[str, Any] | None,
                         after: Mapping[str, Any] | None) -> tuple[str, str]:
    """A ConfigurationUpdate history item for ``kind`` Create, Update or Delete: the alarm (as
    DescribeAlarms gives it) before and after, with CloudWatch's lowerCamelCase keys."""
    data: dict[str, Any] = {"version": "1.0", "type": kind}
    if kind == "Create":
        data["createdAlarm"] = lower_camel(after)
    elif kind == "Update":
        data.update(originalAlarm=lower_camel(before), updatedAlarm=lower_camel(after))
    else:
        data["deletedAlarm"] = lower_camel(before)
    verb = {"Create": "created", "Update": "updated", "Delete": "deleted"}[kind]
    return f'Alarm "{name}" {verb}'[:SUMMARY_CHARS], _bounded(data)


def action(target: str, state_updated_ms: int, message: Mapping[str, Any], error: str | None) -> tuple[str, str]:
    """An Action history item: how the delivery of an alarm's state change to ``target`` ended
    (``error`` None: delivered), with the message sent."""
    data: dict[str, Any] = {"actionState": "Succeeded" if error is None else "Failed",
                            "stateUpdateTimestamp": state_updated_ms, "notificationResource": target,
                            "publishedMessage": json.dumps(message, default=str, separators=(",", ":"))}
    if error is not None:
        data["error"] = error[:SUMMARY_CHARS]
    if len(json.dumps(data)) > HISTORY_DATA_CHARS:
        del data["publishedMessage"]
    summary = (f"Successfully executed action {target}" if error is None
               else f"Failed to execute action {target}. Received error: {error}")
    return summary[:SUMMARY_CHARS], _bounded(data)


def _bounded(data: dict[str, Any]) -> str:
    text = json.dumps(data, separators=(",", ":"), default=str)
    return text if len(text) <= HISTORY_DATA_CHARS else json.dumps({k: v for k, v in data.items()
                                                                    if not isinstance(v, dict)})


def lower_camel(value: Any) -> Any:
    """Keys in CloudWatch's history JSON: the first letter lowered (``OKActions`` is ``oKActions``
    there too); datetimes as ISO 8601 text."""
    if isinstance(value, Mapping):
        return {key[:1].lower() + key[1:]: lower_camel(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [lower_camel(item) for item in value]
    if isinstance(value, datetime):
        return iso_ms(value.timestamp() * 1000)
    return value


def notification(alarm: Mapping[str, Any], old_state: str, new: State, change_ms: int, *, account: str,
                 region: str) -> dict[str, Any]:
    """The alarm's change of state as CloudWatch's SNS notification JSON carries it; ``alarm`` is the
    alarm as DescribeAlarms gives it."""
    updated = alarm["AlarmConfigurationUpdatedTimestamp"]
    return {
        "AlarmName": alarm["AlarmName"],
        "AlarmDescription": alarm.get("AlarmDescription"),
        "AWSAccountId": account,
        "AlarmConfigurationUpdatedTimestamp": iso_ms(updated.timestamp() * 1000),
        "NewStateValue": new.value,
        "NewStateReason": new.reason,
        "StateChangeTime": iso_ms(change_ms),
        "Region": region,
        "AlarmArn": alarm["AlarmArn"],
        "OldStateValue": old_state,
        "OKActions": list(alarm["OKActions"]),
        "AlarmActions": list(alarm["AlarmActions"]),
        "InsufficientDataActions": list(alarm["InsufficientDataActions"]),
        "Trigger": _trigger(alarm),
    }


def _trigger(alarm: Mapping[str, Any]) -> dict[str, Any]:
    trigger: dict[str, Any] = {}
    if "Metrics" in alarm:
        trigger["Metrics"] = [_lower_dimensions(query) for query in alarm["Metrics"]]
    else:
        trigger.update(MetricName=alarm["MetricName"], Namespace=alarm["Namespace"])
        if "ExtendedStatistic" in alarm:
            trigger.update(StatisticType="ExtendedStatistic", ExtendedStatistic=alarm["ExtendedStatistic"])
        else:
            trigger.update(StatisticType="Statistic", Statistic=str(alarm["Statistic"]).upper())
        trigger.update(Unit=alarm.get("Unit"), Dimensions=[{"value": d["Value"], "name": d["Name"]}
                                                           for d in alarm.get("Dimensions", [])])
        trigger["Period"] = alarm["Period"]
    trigger["EvaluationPeriods"] = alarm["EvaluationPeriods"]
    if "DatapointsToAlarm" in alarm:
        trigger["DatapointsToAlarm"] = alarm["DatapointsToAlarm"]
    trigger.update(ComparisonOperator=alarm["ComparisonOperator"], Threshold=alarm["Threshold"],
                   TreatMissingData=alarm.get("TreatMissingData", ""),
                   EvaluateLowSampleCountPercentile=alarm.get("EvaluateLowSampleCountPercentile", ""))
    return trigger


def _lower_dimensions(query: Mapping[str, Any]) -> dict[str, Any]:
    """A Metrics query as the notification shows it: dimensions as {"value", "name"}."""
    found = dict(query)
    if "MetricStat" in found:
        stat = dict(found["MetricStat"])
        metric = dict(stat["Metric"])
        metric["Dimensions"] = [{"value": d["Value"], "name": d["Name"]} for d in metric.get("Dimensions", [])]
        stat["Metric"] = metric
        found["MetricStat"] = stat
    return found


# -- CloudWatch's ways of writing numbers and times ---------------------------------------------


def java_double(value: float) -> str:
    """A number as Java prints a double, as CloudWatch's reasons show them: ``2.0``, ``0.25``,
    ``1.0E-4``, ``1.5E7``."""
    if math.isnan(value) or math.isinf(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(float(value))
        return text if "." in text or "e" in text else text + ".0"
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    shown = "".join(map(str, digits))
    assert isinstance(exponent, int)
    return f"{'-' if sign else ''}{shown[0]}.{shown[1:] or '0'}E{exponent + len(shown) - 1}"


def reason_date(timestamp_ms: int) -> str:
    """A datapoint's time in a reason: ``08/11/22 11:25:00`` (day/month/year, UTC)."""
    moment = time.gmtime(timestamp_ms // 1000)
    return (f"{moment.tm_mday:02d}/{moment.tm_mon:02d}/{moment.tm_year % 100:02d} "
            f"{moment.tm_hour:02d}:{moment.tm_min:02d}:{moment.tm_sec:02d}")


def iso_ms(timestamp_ms: float) -> str:
    """CloudWatch's JSON time: ``2022-11-08T11:26:05.399+0000``."""
    seconds, millis = divmod(round(timestamp_ms), 1000)
    moment = time.gmtime(seconds)
    return (f"{moment.tm_year:04d}-{moment.tm_mon:02d}-{moment.tm_mday:02d}T{moment.tm_hour:02d}:"
            f"{moment.tm_min:02d}:{moment.tm_sec:02d}.{millis:03d}+0000")
