"""CloudWatch's alarm operations, with boto3's shapes: PutMetricAlarm, DescribeAlarms,
DescribeAlarmsForMetric, DeleteAlarms, SetAlarmState, DescribeAlarmHistory, EnableAlarmActions and
DisableAlarmActions; and :func:`evaluate_alarms`, the pass the store's background maintainer runs
(``runtime/watch/maintenance.py``; ``trainmon server`` hands it to its maintainer) to evaluate every
alarm that is due, at CloudWatch's cadence.

Evaluation itself is :mod:`trainmon.cloudwatch.alarms` (pure); this module fetches each alarm's
datapoints from the read layer, as GetMetricData computes them (:mod:`trainmon.read.metric_data`:
a MetricStat's statistic per period, or the alarm's Metrics, checked by :mod:`.metric_queries`),
writes the new states with their history, and hands each state change to the alarm's actions
(:func:`trainmon.runtime.watch.notify.deliver`: an action is ``exec:<command line>`` or an
``http(s)://`` URL, the payload CloudWatch's SNS notification JSON).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..cloudwatch import alarms as model
from ..cloudwatch.model import (
    MetricKey,
    check_dimensions,
    check_metric_name,
    check_namespace,
    check_unit,
    epoch_seconds,
)
from ..errors import (
    AlarmNotFound,
    CloudWatchError,
    InvalidFormat,
    InvalidParameterCombination,
    InvalidParameterValue,
    MissingParameter,
)
from ..jobs.document import ACCOUNT, REGION
from ..read.metric_data import DataQuery, metric_periods, query_results
from ..shapes import refuse_unknown
from ..store import AlarmHistoryRow, AlarmRow, Store
from . import alarm_requests as requests
from .metric_queries import metric_queries
from .times import as_datetime

DESCRIBE_PAGE, HISTORY_PAGE = 50, 100
HISTORY_KEPT_MS = 14 * 86_400_000  # CloudWatch keeps an alarm's history two weeks
SCAN_BY = ("TimestampDescending", "TimestampAscending")
ALARM_TYPES = ("CompositeAlarm", "MetricAlarm")
_ACTIONS = {model.OK: "OKActions", model.ALARM: "AlarmActions", model.INSUFFICIENT_DATA: "InsufficientDataActions"}
_QUERIES_KEPT = 10_000
_queries: dict[tuple[str, int], tuple[list[DataQuery], list[str]]] = {}  # parsed Metrics, per config

Delivery = tuple[str, str, int, dict[str, Any]]  # (alarm, target, the state change's time, the notification)

log = logging.getLogger(__name__)


def arn(name: str) -> str:
    return f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{name}"


def put_metric_alarm(store: Store, *, AlarmName: str | None = None, **request: Any) -> dict[str, Any]:
    """Create an alarm (INSUFFICIENT_DATA, evaluated at the next pass), or replace one's configuration
    (its state stays; the Tags of an existing alarm stay as they were)."""
    refuse_unknown(request, InvalidParameterValue, allowed=_PUT_MEMBERS)
    config = requests.check_put({"AlarmName": AlarmName, **request})
    if "Metrics" in config:  # computed once now, so an expression that cannot work is refused here
        _dry_run(store, config)
    now_ms = _now_ms()

    def make(found: AlarmRow | None) -> tuple[AlarmRow, list[AlarmHistoryRow]]:
        if found is None:
            alarm = AlarmRow(config["AlarmName"], config, model.INSUFFICIENT_DATA, model.INITIAL_REASON, None, now_ms,
                             now_ms, None, now_ms, requests.every_ms(config))
            return alarm, [_configuration("Create", None, alarm, now_ms)]
        before = metric_alarm(found)
        kept = {**config, "Tags": found.config["Tags"]} if "Tags" in found.config else {
            k: v for k, v in config.items() if k != "Tags"}
        alarm = replace(found, config=kept, configured_ms=now_ms, every_ms=requests.every_ms(config), next_ms=0)
        return alarm, [_configuration("Update", before, alarm, now_ms)]

    store.put_alarm(config["AlarmName"], make)
    return {}


_PUT_MEMBERS = ("AlarmDescription", "ActionsEnabled", "OKActions", "AlarmActions", "InsufficientDataActions",
                "MetricName", "Namespace", "Statistic", "ExtendedStatistic", "Dimensions", "Period", "Unit",
                "EvaluationPeriods", "DatapointsToAlarm", "Threshold", "ComparisonOperator", "TreatMissingData",
                "EvaluateLowSampleCountPercentile", "Metrics", "Tags", "ThresholdMetricId", "EvaluationCriteria",
                "EvaluationInterval")


def describe_alarms(store: Store, *, AlarmNames: list[str] | None = None, AlarmNamePrefix: str | None = None,
                    AlarmTypes: list[str] | None = None, ChildrenOfAlarmName: str | None = None,
                    ParentsOfAlarmName: str | None = None, StateValue: str | None = None,
                    ActionPrefix: str | None = None, MaxRecords: int | None = None, NextToken: str | None = None,
                    **unsupported: Any) -> dict[str, Any]:
    """Alarms by name, filtered; MaxRecords (default 50) a page. trainmon has no composite alarms:
    CompositeAlarms is always empty, and so are an alarm's children and parents."""
    refuse_unknown(unsupported, InvalidParameterValue)
    names = requests.check_names(AlarmNames, required=False) if AlarmNames is not None else None
    if names is not None and AlarmNamePrefix is not None:
        raise InvalidParameterCombination("The parameters AlarmNames and AlarmNamePrefix are mutually exclusive.")
    if AlarmNamePrefix is not None:
        requests.check_alarm_name(AlarmNamePrefix, "AlarmNamePrefix")
    types = _alarm_types(AlarmTypes)
    related = _related(ChildrenOfAlarmName, ParentsOfAlarmName, AlarmNames, AlarmNamePrefix, AlarmTypes, StateValue,
                       ActionPrefix)
    requests.one_of(StateValue, "StateValue", model.STATES)
    if ActionPrefix is not None and (not isinstance(ActionPrefix, str) or not 1 <= len(ActionPrefix) <= 1024):
        raise InvalidParameterValue("The parameter ActionPrefix must be 1 to 1024 characters.")
    limit = requests.max_records(MaxRecords, DESCRIBE_PAGE)
    bound = requests.fingerprint(names, AlarmNamePrefix, types, StateValue, ActionPrefix, related)
    after = requests.cursor(NextToken, bound) if NextToken is not None else None
    if related or "MetricAlarm" not in types:
        return {"MetricAlarms": [], "CompositeAlarms": []}
    found: list[AlarmRow] = []
    cursor = after
    while len(found) <= limit:
        batch = store.alarms(names=names, prefix=AlarmNamePrefix, state=StateValue, after=cursor, limit=limit + 1)
        found += [alarm for alarm in batch if ActionPrefix is None or _acts(alarm, ActionPrefix)]
        if len(batch) < limit + 1:
            break
        cursor = batch[-1].name
    response: dict[str, Any] = {"MetricAlarms": [metric_alarm(alarm) for alarm in found[:limit]],
                                "CompositeAlarms": []}
    if len(found) > limit:
        response["NextToken"] = requests.token(found[limit - 1].name, bound)
    return response


def describe_alarms_for_metric(store: Store, *, MetricName: str | None = None, Namespace: str | None = None,
                               Statistic: str | None = None, ExtendedStatistic: str | None = None,
                               Dimensions: list[dict[str, str]] | None = None, Period: int | None = None,
                               Unit: str | None = None, **unsupported: Any) -> dict[str, Any]:
    """The alarms on one metric (its exact dimension set), filtered by statistic, period and unit;
    alarms on metric math are not among them, as in CloudWatch."""
    refuse_unknown(unsupported, InvalidParameterValue)
    key = MetricKey(check_namespace(Namespace), check_metric_name(MetricName),
                    check_dimensions(Dimensions, "Dimensions"))  # type: ignore[arg-type]
    if Unit is not None:
        check_unit(Unit, "Unit")
    wanted = {"Statistic": Statistic, "ExtendedStatistic": ExtendedStatistic, "Period": Period, "Unit": Unit}
    found = []
    for alarm in store.alarms(namespace=key.namespace, metric_name=key.name):
        dimensions = tuple((d["Name"], d["Value"]) for d in alarm.config.get("Dimensions", []))
        if dimensions == key.dimensions and all(value is None or alarm.config.get(field) == value
                                                for field, value in wanted.items()):
            found.append(metric_alarm(alarm))
    return {"MetricAlarms": found}


def delete_alarms(store: Store, *, AlarmNames: list[str] | None = None, **unsupported: Any) -> dict[str, Any]:
    """Delete the alarms named; names of no alarm are passed over, as CloudWatch does. Their history stays."""
    refuse_unknown(unsupported, InvalidParameterValue)
    names = requests.check_names(AlarmNames)
    now_ms = _now_ms()
    store.delete_alarms(names, lambda alarm: [_configuration("Delete", metric_alarm(alarm), None, now_ms)])
    return {}


def set_alarm_state(store: Store, *, AlarmName: str | None = None, StateValue: str | None = None,
                    StateReason: str | None = None, StateReasonData: str | None = None,
                    **unsupported: Any) -> dict[str, Any]:
    """Set an alarm's state until its next evaluation; a change of state runs the new state's actions."""
    refuse_unknown(unsupported, InvalidParameterValue)
    name = requests.check_alarm_name(AlarmName, "AlarmName")
    if StateValue is None:
        raise MissingParameter("The parameter StateValue is required.")
    requests.one_of(StateValue, "StateValue", model.STATES)
    if StateReason is None:
        raise MissingParameter("The parameter StateReason is required.")
    if not isinstance(StateReason, str) or len(StateReason) > model.REASON_CHARS:
        raise InvalidParameterValue("The parameter StateReason must be text of at most 1023 characters.")
    if StateReasonData is not None:
        _check_reason_data(StateReasonData)
    now_ms = _now_ms()
    deliveries: list[Delivery] = []

    def change(alarm: AlarmRow) -> list[AlarmHistoryRow]:
        new = model.State(StateValue, StateReason, StateReasonData or None)
        history, sent = _new_state(alarm, new, now_ms, evaluation_state=alarm.evaluation_state)
        deliveries.extend(sent)
        return history

    if not store.change_alarms([name], change):
        raise AlarmNotFound(f"Alarm {name} not found.")
    _deliver(store, deliveries)
    return {}


def describe_alarm_history(store: Store, *, AlarmName: str | None = None, AlarmContributorId: str | None = None,
                           AlarmTypes: list[str] | None = None, HistoryItemType: str | None = None,
                           StartDate: Any = None, EndDate: Any = None, MaxRecords: int | None = None,
                           NextToken: str | None = None, ScanBy: str | None = None,
                           **unsupported: Any) -> dict[str, Any]:
    """History items, newest first unless ScanBy says otherwise; MaxRecords (default 100) a page.
    Alarm contributors belong to Metrics Insights alarms, which trainmon does not have: asking for
    their items finds none."""
    refuse_unknown(unsupported, InvalidParameterValue)
    if AlarmName is not None:
        requests.check_alarm_name(AlarmName, "AlarmName")
    types = _alarm_types(AlarmTypes)
    requests.one_of(HistoryItemType, "HistoryItemType", model.HISTORY_TYPES)
    requests.one_of(ScanBy, "ScanBy", SCAN_BY)
    start_ms = round(epoch_seconds(StartDate, "StartDate") * 1000) if StartDate is not None else None
    end_ms = round(epoch_seconds(EndDate, "EndDate") * 1000) if EndDate is not None else None
    if start_ms is not None and end_ms is not None and end_ms < start_ms:
        raise InvalidParameterValue("The parameter StartDate must not be after EndDate.")
    limit = requests.max_records(MaxRecords, HISTORY_PAGE)
    ascending = ScanBy == "TimestampAscending"
    bound = requests.fingerprint(AlarmName, AlarmContributorId, types, HistoryItemType, start_ms, end_ms, ascending)
    after = requests.cursor(NextToken, bound) if NextToken is not None else None
    if after is not None and not (isinstance(after, list) and len(after) == 2 and all(isinstance(x, int) for x in after)):
        raise CloudWatchError("The next token specified is invalid.", code="InvalidNextToken")
    if (AlarmContributorId is not None or "MetricAlarm" not in types
            or (HistoryItemType or "").startswith("AlarmContributor")):
        return {"AlarmHistoryItems": []}
    rows = store.alarm_history(name=AlarmName, item_type=HistoryItemType, start_ms=start_ms, end_ms=end_ms,
                               ascending=ascending, after=(after[0], after[1]) if after else None, limit=limit + 1)
    response: dict[str, Any] = {"AlarmHistoryItems": [_history_item(row) for row in rows[:limit]]}
    if len(rows) > limit:
        response["NextToken"] = requests.token([rows[limit - 1].timestamp_ms, rows[limit - 1].id], bound)
    return response


def enable_alarm_actions(store: Store, *, AlarmNames: list[str] | None = None, **unsupported: Any) -> dict[str, Any]:
    refuse_unknown(unsupported, InvalidParameterValue)
    _set_actions_enabled(store, requests.check_names(AlarmNames), True)
    return {}


def disable_alarm_actions(store: Store, *, AlarmNames: list[str] | None = None, **unsupported: Any) -> dict[str, Any]:
    """Actions stop running on state changes; the alarms go on being evaluated."""
    refuse_unknown(unsupported, InvalidParameterValue)
    _set_actions_enabled(store, requests.check_names(AlarmNames), False)
    return {}


def _set_actions_enabled(store: Store, names: list[str], enabled: bool) -> None:
    now_ms = _now_ms()

    def change(alarm: AlarmRow) -> list[AlarmHistoryRow] | None:
        if alarm.config.get("ActionsEnabled", True) == enabled:
            return None
        before = metric_alarm(alarm)
        alarm.config = {**alarm.config, "ActionsEnabled": enabled}
        alarm.configured_ms = now_ms
        return [_configuration("Update", before, alarm, now_ms)]

    store.change_alarms(names, change)


# -- the answer's shapes --------------------------------------------------------------------------


def metric_alarm(alarm: AlarmRow) -> dict[str, Any]:
    """An alarm as DescribeAlarms gives it (MetricAlarm)."""
    config = alarm.config
    found: dict[str, Any] = {"AlarmName": alarm.name, "AlarmArn": arn(alarm.name)}
    if "AlarmDescription" in config:
        found["AlarmDescription"] = config["AlarmDescription"]
    found["AlarmConfigurationUpdatedTimestamp"] = as_datetime(alarm.configured_ms / 1000)
    found["ActionsEnabled"] = config.get("ActionsEnabled", True)
    for field in requests.ACTION_LISTS:
        found[field] = list(config.get(field, []))
    found.update(StateValue=alarm.state, StateReason=alarm.reason)
    if alarm.reason_data is not None:
        found["StateReasonData"] = alarm.reason_data
    found["StateUpdatedTimestamp"] = as_datetime(alarm.state_updated_ms / 1000)
    for field in ("MetricName", "Namespace", "Statistic", "ExtendedStatistic", "Dimensions", "Period", "Unit",
                  "EvaluationPeriods", "DatapointsToAlarm", "Threshold", "ComparisonOperator", "TreatMissingData",
                  "EvaluateLowSampleCountPercentile", "Metrics"):
        if field in config:
            found[field] = config[field]
    if alarm.evaluation_state is not None:
        found["EvaluationState"] = alarm.evaluation_state
    found["StateTransitionedTimestamp"] = as_datetime(alarm.transitioned_ms / 1000)
    return found


def _history_item(row: AlarmHistoryRow) -> dict[str, Any]:
    return {"AlarmName": row.alarm_name, "AlarmType": "MetricAlarm", "Timestamp": as_datetime(row.timestamp_ms / 1000),
            "HistoryItemType": row.item_type, "HistorySummary": row.summary, "HistoryData": row.data}


def _configuration(kind: str, before: dict[str, Any] | None, after: AlarmRow | None, now_ms: int) -> AlarmHistoryRow:
    shown = metric_alarm(after) if after is not None else None
    name = (shown or before or {})["AlarmName"]
    summary, data = model.configuration_update(kind, name, before, shown)
    return AlarmHistoryRow(name, now_ms, "ConfigurationUpdate", summary, data)


def _alarm_types(value: Any) -> list[str]:
    if value is None:
        return ["MetricAlarm"]
    if not isinstance(value, list) or any(item not in ALARM_TYPES for item in value):
        raise InvalidParameterValue("The parameter AlarmTypes takes CompositeAlarm and MetricAlarm.")
    return list(value)


def _related(children: Any, parents: Any, *others: Any) -> str | None:
    """ChildrenOfAlarmName or ParentsOfAlarmName, which go with no filter but MaxRecords and NextToken."""
    given = [(field, value) for field, value in (("ChildrenOfAlarmName", children), ("ParentsOfAlarmName", parents))
             if value is not None]
    if not given:
        return None
    field, value = given[0]
    requests.check_alarm_name(value, field)
    if len(given) > 1 or any(other is not None for other in others):
        raise InvalidParameterCombination(f"The parameter {field} goes with no other parameter but MaxRecords and "
                                          "NextToken.")
    return f"{field}={value}"


def _acts(alarm: AlarmRow, prefix: str) -> bool:
    return any(target.startswith(prefix) for field in requests.ACTION_LISTS for target in alarm.config.get(field, []))


def _check_reason_data(value: Any) -> None:
    import json

    if not isinstance(value, str) or len(value) > model.REASON_DATA_CHARS:
        raise InvalidParameterValue("The parameter StateReasonData must be text of at most 4000 characters.")
    try:
        json.loads(value)
    except ValueError as error:
        raise InvalidFormat(f"The parameter StateReasonData must be JSON: {error}.") from None


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- evaluation ---------------------------------------------------------------------------------


@dataclass
class AlarmPass:
    """What one evaluation pass did."""

    evaluated: int = 0
    changed: int = 0  # alarms whose state (or evaluation state) the pass wrote
    actions: int = 0  # deliveries handed to trainmon.runtime.watch.notify
    failed: int = 0  # alarms whose data could not be read; tried again at their next slot
    expired_history: int = 0


def evaluate_alarms(store: Store, now_s: float) -> AlarmPass:
    """Evaluate every alarm due at ``now_s`` (each once a minute, or every 10 s for a high-resolution
    period, over the periods that ended at its last slot), write the changes, run the actions."""
    done = AlarmPass()
    changes: list[tuple[AlarmRow, list[AlarmHistoryRow]]] = []
    deliveries: dict[str, list[Delivery]] = {}
    for alarm in store.claim_due_alarms(int(now_s * 1000)):
        done.evaluated += 1
        try:
            change = _evaluation(store, alarm, now_s)
        except Exception:  # its data unreadable, or a bug: the other alarms are still evaluated
            log.exception("alarm %s could not be evaluated", alarm.name)
            done.failed += 1
            continue
        if change is not None:
            changed, history, sent = change
            changes.append((changed, history))
            deliveries[changed.name] = sent
    written = store.record_evaluations(changes)
    done.changed = len(written)
    for alarm in written:
        done.actions += len(deliveries[alarm.name])
        _deliver(store, deliveries[alarm.name])
    done.expired_history = store.expire_alarm_history(int(now_s * 1000) - HISTORY_KEPT_MS)
    return done


def _evaluation(store: Store, alarm: AlarmRow, now_s: float) -> tuple[AlarmRow, list[AlarmHistoryRow],
                                                                      list[Delivery]] | None:
    """The alarm after its evaluation at its slot, with the history items and deliveries that go with
    the change; None when nothing changes."""
    config = alarm.config
    every_s = alarm.every_ms // 1000
    slot_s = math.floor(now_s / every_s) * every_s
    period = requests.alarm_period(config)
    rule = _rule(config)
    count = model.evaluation_range(rule.evaluation_periods)
    start_s = slot_s - count * period
    try:
        periods = _periods(store, alarm, start_s, slot_s, period, now_s)
    except CloudWatchError as error:  # Metrics that cannot be computed as the data stands
        return _error(alarm, f"Evaluation error: {error.message}", now_s)
    outcome = model.evaluate(rule, periods)
    if outcome.state is None or _too_few_samples(config, outcome):
        return _cleared(alarm, int(now_s * 1000)) if alarm.evaluation_state is not None else None
    if outcome.state == alarm.state and alarm.evaluation_state is None:
        return None
    reason = model.state_reason(rule, outcome)
    data = model.state_reason_data(rule, outcome, query_s=now_s, period=period, statistic=config.get("Statistic"),
                                   extended_statistic=config.get("ExtendedStatistic"), unit=config.get("Unit"))
    changed = replace(alarm)
    history, sent = _new_state(changed, model.State(outcome.state, reason, data), int(now_s * 1000),
                               evaluation_state=None)
    return changed, history, sent


def _periods(store: Store, alarm: AlarmRow, start_s: float, end_s: float, period: int,
             now_s: float) -> list[model.Datapoint]:
    """The evaluation range's periods, oldest first: the alarm's metric (its statistic per period)
    or its Metrics' returned result."""
    config = alarm.config
    starts = [round((start_s + index * period) * 1000) for index in range(round((end_s - start_s) / period))]
    if "Metrics" not in config:
        key = MetricKey(config["Namespace"], config["MetricName"],
                        tuple(sorted((d["Name"], d["Value"]) for d in config.get("Dimensions", []))))
        stat = config.get("Statistic") or config["ExtendedStatistic"]
        found = metric_periods(store, key, starts[0], round(end_s * 1000), period, stat, config.get("Unit"))
        return [model.Datapoint(ms, *found[ms]) if ms in found else model.Datapoint(ms, None) for ms in starts]
    queries, order = _parsed(alarm)
    results = query_results(store, queries, order, start_s, end_s, now_s)
    if len(results) != 1:
        raise InvalidParameterValue(f"the returned query of Metrics gave {len(results)} time series; an alarm "
                                    "watches exactly one.")
    points = results[0][2].points
    return [model.Datapoint(ms, points.get(ms)) for ms in starts]


def _parsed(alarm: AlarmRow) -> tuple[list[DataQuery], list[str]]:
    """The alarm's Metrics as checked queries, parsed once per configuration."""
    key = (alarm.name, alarm.configured_ms)
    if key not in _queries:
        if len(_queries) >= _QUERIES_KEPT:
            _queries.clear()
        _queries[key] = metric_queries(alarm.config["Metrics"])
    return _queries[key]


def _dry_run(store: Store, config: dict[str, Any]) -> None:
    """Compute an alarm's Metrics over its last period, so that one that cannot give a time series is
    refused now rather than at every evaluation."""
    queries, order = metric_queries(config["Metrics"])
    now_s = time.time()
    period = requests.alarm_period(config)
    end_s = math.floor(now_s / 60) * 60
    try:
        query_results(store, queries, order, end_s - period, end_s, now_s)
    except (InvalidParameterValue, MissingParameter) as error:
        raise type(error)(error.message.replace("MetricDataQueries", "Metrics")) from None


def _rule(config: dict[str, Any]) -> model.Rule:
    periods = int(config["EvaluationPeriods"])
    return model.Rule(config["ComparisonOperator"], float(config["Threshold"]), periods,
                      int(config.get("DatapointsToAlarm", periods)), config.get("TreatMissingData", model.MISSING))


def _too_few_samples(config: dict[str, Any], outcome: model.Outcome) -> bool:
    """A percentile alarm with EvaluateLowSampleCountPercentile ignore, over too few samples."""
    extended = config.get("ExtendedStatistic")
    if extended is None or config.get("EvaluateLowSampleCountPercentile") != "ignore":
        return False
    from ..cloudwatch.statistics import percentile_of

    samples = sum(point.sample_count or 0.0 for point in outcome.evaluated if point.value is not None)
    return model.low_sample_count(percentile_of(extended), samples)


def _error(alarm: AlarmRow, reason: str, now_s: float) -> tuple[AlarmRow, list[AlarmHistoryRow], list[Delivery]] | None:
    if alarm.evaluation_state == "EVALUATION_ERROR" and alarm.reason == reason[:model.REASON_CHARS]:
        return None
    changed = replace(alarm)
    new = model.State(model.INSUFFICIENT_DATA, reason[:model.REASON_CHARS])
    history, sent = _new_state(changed, new, int(now_s * 1000), evaluation_state="EVALUATION_ERROR")
    return changed, history, sent


def _cleared(alarm: AlarmRow, now_ms: int) -> tuple[AlarmRow, list[AlarmHistoryRow], list[Delivery]]:
    """The evaluation state of an alarm whose data can be computed again, cleared (its state kept)."""
    return replace(alarm, evaluation_state=None, state_updated_ms=now_ms), [], []


def _new_state(alarm: AlarmRow, new: model.State, now_ms: int, *,
               evaluation_state: str | None) -> tuple[list[AlarmHistoryRow], list[Delivery]]:
    """Give ``alarm`` (in place) the state ``new``: its StateUpdate item, and when the value changed
    with actions enabled, its actions' items and deliveries."""
    old = model.State(alarm.state, alarm.reason, alarm.reason_data)
    transition = old.value != new.value
    alarm.state, alarm.reason, alarm.reason_data = new.value, new.reason, new.reason_data
    alarm.state_updated_ms, alarm.evaluation_state = now_ms, evaluation_state
    if transition:
        alarm.transitioned_ms = now_ms
    summary, data = model.state_update(old, new)
    history = [AlarmHistoryRow(alarm.name, now_ms, "StateUpdate", summary, data)]
    sent: list[Delivery] = []
    targets = alarm.config.get(_ACTIONS[new.value], []) if alarm.config.get("ActionsEnabled", True) else []
    if transition and targets:
        payload = model.notification(metric_alarm(alarm), old.value, new, now_ms, account=ACCOUNT, region=REGION)
        sent.extend((alarm.name, target, now_ms, payload) for target in targets)
    return history, sent


def _deliver(store: Store, deliveries: list[Delivery]) -> None:
    """Hand the deliveries over (they run off this thread); each one's Action history item is
    written once it has ended, saying whether it succeeded."""
    from ..runtime.watch import notify

    for name, target, changed_ms, payload in deliveries:
        def done(error: str | None, name: str = name, target: str = target, changed_ms: int = changed_ms,
                 payload: dict[str, Any] = payload) -> None:
            summary, data = model.action(target, changed_ms, payload, error)
            store.add_alarm_history([AlarmHistoryRow(name, max(_now_ms(), changed_ms), "Action", summary, data)])

        notify.deliver(target, payload, on_done=done)


OPERATIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "PutMetricAlarm": put_metric_alarm,
    "DescribeAlarms": describe_alarms,
    "DescribeAlarmsForMetric": describe_alarms_for_metric,
    "DeleteAlarms": delete_alarms,
    "SetAlarmState": set_alarm_state,
    "DescribeAlarmHistory": describe_alarm_history,
    "EnableAlarmActions": enable_alarm_actions,
    "DisableAlarmActions": disable_alarm_actions,
}
