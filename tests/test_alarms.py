"""CloudWatch alarms: the evaluation against the user guide's own examples (pure), the operations
with CloudWatch's codes, both store backends, alarms evaluated by the background maintainer on a
manual clock (a real job's metric going OK -> ALARM -> OK with its exec actions run), metric math,
the CLI, and real boto3 clients against a real ``trainmon server``."""

from __future__ import annotations

import json
import math
import shlex
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

import trainmon
from trainmon.api.alarms import evaluate_alarms
from trainmon.clock import ManualClock
from trainmon.cloudwatch import alarms as model
from trainmon.cloudwatch.model import JOB_NAMESPACE
from trainmon.errors import TrainmonError
from trainmon.runtime.watch import notify
from trainmon.runtime.watch.maintenance import Maintainer
from trainmon.store import Store

from .conftest import PY, StoreTarget, run_cli, start_server

RECORDER = """
import pathlib, sys, uuid
pathlib.Path(sys.argv[1], uuid.uuid4().hex + ".json").write_bytes(sys.stdin.buffer.read())
"""


def cloudwatch(store: Store) -> Any:
    return trainmon.client("cloudwatch", store=store)


def recorder(tmp_path: Path, name: str) -> tuple[str, Path]:
    """An exec action that keeps each payload it is given as a file in a folder of its own."""
    script = tmp_path / "record.py"
    script.write_text(RECORDER, encoding="utf-8")
    folder = tmp_path / name
    folder.mkdir()
    return f"exec:{shlex.quote(sys.executable)} {shlex.quote(str(script))} {shlex.quote(str(folder))}", folder


def payloads(folder: Path) -> list[dict[str, Any]]:
    notify.flush()
    found = [json.loads(path.read_text(encoding="utf-8")) for path in folder.iterdir()]
    return sorted(found, key=lambda payload: payload["StateChangeTime"])


def described(store: Store, name: str) -> dict[str, Any]:
    alarms: list[dict[str, Any]] = cloudwatch(store).describe_alarms(AlarmNames=[name])["MetricAlarms"]
    assert len(alarms) == 1
    return alarms[0]


def state_changes(store: Store, name: str) -> list[str]:
    items = cloudwatch(store).describe_alarm_history(AlarmName=name, HistoryItemType="StateUpdate",
                                                     ScanBy="TimestampAscending")["AlarmHistoryItems"]
    return [item["HistorySummary"] for item in items]


# -- the evaluation, against the CloudWatch User Guide's tables -----------------------------------

THRESHOLD = 5.0
RULE = model.Rule("GreaterThanThreshold", THRESHOLD, evaluation_periods=3, datapoints_to_alarm=3)
RETAIN = None
TREATMENTS = ("missing", "ignore", "breaching", "notBreaching")

# "How alarm state is evaluated when data is missing": the 5 most recent periods (newest on the
# right; 0 not breaching, X breaching, - missing), and the state for each TreatMissingData.
GUIDE_3_OF_3 = [
    ("0 - X - X", ("OK", "OK", "OK", "OK")),
    ("0 - - - -", ("OK", "OK", "OK", "OK")),
    ("- - - - -", ("INSUFFICIENT_DATA", RETAIN, "ALARM", "OK")),
    ("0 X X - X", ("ALARM", "ALARM", "ALARM", "ALARM")),
    ("- - X - -", ("ALARM", RETAIN, "ALARM", "OK")),
    # the guide's earlier edition: the premature-alarm rule from both ends of the range
    ("- - - - X", ("INSUFFICIENT_DATA", RETAIN, "ALARM", "OK")),
    ("X - - - -", ("ALARM", RETAIN, "ALARM", "OK")),
]
GUIDE_2_OF_3 = [
    ("0 - X - X", ("ALARM", "ALARM", "ALARM", "ALARM")),
    ("0 0 X 0 X", ("ALARM", "ALARM", "ALARM", "ALARM")),
    ("0 - X - -", ("OK", "OK", "ALARM", "OK")),
    ("- - - - 0", ("OK", "OK", "ALARM", "OK")),
    ("- - - X -", ("ALARM", RETAIN, "ALARM", "OK")),
]


def periods(shown: str, period_ms: int = 300_000) -> list[model.Datapoint]:
    values = {"0": 1.0, "X": 9.0, "-": None}
    return [model.Datapoint(index * period_ms, values[mark]) for index, mark in enumerate(shown.split())]


@pytest.mark.parametrize(("shown", "expected"), GUIDE_3_OF_3, ids=[row[0] for row in GUIDE_3_OF_3])
@pytest.mark.parametrize("treatment", TREATMENTS)
def test_three_of_three_as_the_user_guide_shows(shown: str, expected: tuple[str | None, ...], treatment: str) -> None:
    rule = model.Rule("GreaterThanThreshold", THRESHOLD, 3, 3, treatment)
    assert model.evaluate(rule, periods(shown)).state == expected[TREATMENTS.index(treatment)]


@pytest.mark.parametrize(("shown", "expected"), GUIDE_2_OF_3, ids=[row[0] for row in GUIDE_2_OF_3])
@pytest.mark.parametrize("treatment", TREATMENTS)
def test_two_of_three_as_the_user_guide_shows(shown: str, expected: tuple[str | None, ...], treatment: str) -> None:
    rule = model.Rule("GreaterThanThreshold", THRESHOLD, 3, 2, treatment)
    assert model.evaluate(rule, periods(shown)).state == expected[TREATMENTS.index(treatment)]


def test_the_range_is_two_periods_longer_than_the_evaluation_periods() -> None:
    assert model.evaluation_range(3) == 5  # the guide's examples
    assert model.evaluation_range(1) == 3


@pytest.mark.parametrize(("comparison", "value", "breaches"), [
    ("GreaterThanThreshold", 5.0, False), ("GreaterThanThreshold", 5.1, True),
    ("GreaterThanOrEqualToThreshold", 5.0, True), ("GreaterThanOrEqualToThreshold", 4.9, False),
    ("LessThanThreshold", 5.0, False), ("LessThanThreshold", 4.9, True),
    ("LessThanOrEqualToThreshold", 5.0, True), ("LessThanOrEqualToThreshold", 5.1, False),
])
def test_the_four_static_comparisons(comparison: str, value: float, breaches: bool) -> None:
    assert model.Rule(comparison, 5.0, 1, 1).breaches(value) is breaches


def test_reasons_are_worded_as_cloudwatch_words_them() -> None:
    rule = model.Rule("GreaterThanThreshold", 0.0, 3, 3)
    stamps = [1_667_906_580_000, 1_667_906_640_000, 1_667_906_700_000]  # 08/11/22 11:23, 11:24, 11:25
    alarm = model.evaluate(rule, [model.Datapoint(t, 20000.0) for t in stamps])
    assert model.state_reason(rule, alarm) == (
        "Threshold Crossed: 3 out of the last 3 datapoints [20000.0 (08/11/22 11:25:00), 20000.0 (08/11/22 11:24:00), "
        "20000.0 (08/11/22 11:23:00)] were greater than the threshold (0.0) (minimum 3 datapoints for OK -> ALARM "
        "transition).")
    one = model.Rule("GreaterThanOrEqualToThreshold", 1.0, 2, 2)
    ok = model.evaluate(one, [model.Datapoint(stamps[0], 5.0), model.Datapoint(stamps[1], 0.0)])
    assert model.state_reason(one, ok) == (
        "Threshold Crossed: 1 out of the last 2 datapoints [0.0 (08/11/22 11:24:00)] was not greater than or equal to "
        "the threshold (1.0) (minimum 1 datapoint for ALARM -> OK transition).")
    breaching = model.Rule("GreaterThanThreshold", 0.0, 2, 2, "breaching")
    empty = model.evaluate(breaching, [model.Datapoint(t, None) for t in stamps + [stamps[-1] + 60_000]])
    assert model.state_reason(breaching, empty) == (
        "Threshold Crossed: no datapoints were received for 2 periods and 2 missing datapoints were treated as "
        "[Breaching].")
    eight = model.Rule("LessThanOrEqualToThreshold", 0.0, 8, 8, "breaching")
    mostly_missing = [model.Datapoint(stamps[0] + i * 60_000, 2.0 if i == 2 else None) for i in range(10)]
    assert model.state_reason(eight, model.evaluate(eight, mostly_missing)) == (
        "Threshold Crossed: 1 datapoint [2.0 (08/11/22 11:25:00)] was not less than or equal to the threshold (0.0) "
        "and 7 missing datapoints were treated as [Breaching].")
    missing = model.Rule("GreaterThanThreshold", 0.0, 3, 3)
    unknown = model.evaluate(missing, [model.Datapoint(t, None) for t in stamps * 2])
    assert model.state_reason(missing, unknown) == "Insufficient Data: 3 datapoints were unknown."


def test_reason_data_is_the_json_cloudwatch_writes() -> None:
    rule = model.Rule("GreaterThanThreshold", 50.0, 2, 1, "breaching")
    points = [model.Datapoint(1_570_000_000_000 + i * 300_000, value, 5.0 if value is not None else None)
              for i, value in enumerate([None, 60.0, None, None])]
    outcome = model.evaluate(rule, points)
    data = json.loads(model.state_reason_data(rule, outcome, query_s=1_570_001_300.5, period=300,
                                              statistic="Average"))
    assert data == {
        "version": "1.0", "queryDate": "2019-10-02T07:28:20.500+0000", "startDate": "2019-10-02T07:11:40.000+0000",
        "statistic": "Average", "period": 300, "recentDatapoints": [60.0], "threshold": 50.0,
        "evaluatedDatapoints": [{"timestamp": "2019-10-02T07:21:40.000+0000"},
                                {"timestamp": "2019-10-02T07:11:40.000+0000", "sampleCount": 5.0, "value": 60.0}],
    }


@pytest.mark.parametrize(("value", "shown"), [(2.0, "2.0"), (0.0666851903306472, "0.0666851903306472"), (80, "80.0"),
                                              (1e-4, "1.0E-4"), (15_000_000.0, "1.5E7"), (-0.25, "-0.25"),
                                              (1234567.5, "1234567.5")])
def test_numbers_are_written_as_java_writes_doubles(value: float, shown: str) -> None:
    assert model.java_double(value) == shown


def test_too_few_samples_for_a_percentile() -> None:
    assert model.low_sample_count(99, 999) and not model.low_sample_count(99, 1000)
    assert model.low_sample_count(10, 99) and not model.low_sample_count(10, 100)
    assert not model.low_sample_count(100, 1)


# -- validation, with CloudWatch's codes ----------------------------------------------------------

BASE: dict[str, Any] = {"AlarmName": "a", "Namespace": "Team", "MetricName": "loss", "Statistic": "Average",
                        "Period": 60, "EvaluationPeriods": 1, "Threshold": 1.0,
                        "ComparisonOperator": "GreaterThanThreshold"}
STAT = {"Metric": {"Namespace": "Team", "MetricName": "loss"}, "Period": 60, "Stat": "Average"}
MATH = {key: value for key, value in BASE.items() if key not in ("Namespace", "MetricName", "Statistic", "Period")}
ARN = "arn:aws:sns:us-east-1:123456789012:topic"

INVALID_PUTS: list[tuple[str, dict[str, Any], str, str]] = [
    ("no name", {"AlarmName": None}, "MissingParameter", "The parameter AlarmName is required."),
    ("long name", {"AlarmName": "a" * 256}, "InvalidParameterValue", "AlarmName must be 1 to 255 characters"),
    ("control character", {"AlarmName": "a\x07b"}, "InvalidParameterValue", "ASCII control character"),
    ("long description", {"AlarmDescription": "d" * 1025}, "InvalidParameterValue", "at most 1024"),
    ("actions enabled text", {"ActionsEnabled": "yes"}, "InvalidParameterValue", "ActionsEnabled must be true or"),
    ("an SNS topic", {"AlarmActions": [ARN]}, "InvalidParameterValue", "is an action trainmon cannot run"),
    ("an autoscaling policy", {"OKActions": ["arn:aws:autoscaling:us-east-1:1:scalingPolicy:x"]},
     "InvalidParameterValue", "OKActions.member.1 is an action trainmon cannot run"),
    ("a mail address", {"InsufficientDataActions": ["mailto:me@example.com"]}, "InvalidParameterValue",
     "InsufficientDataActions.member.1 is not a valid action"),
    ("an empty command", {"AlarmActions": ["exec:"]}, "InvalidParameterValue", "names no command"),
    ("six actions", {"AlarmActions": ["exec:true"] * 6}, "InvalidParameterValue", "at most 5 actions"),
    ("no metric", {"MetricName": None}, "MissingParameter", "MetricName or Metrics is required"),
    ("no namespace", {"Namespace": None}, "MissingParameter", "The parameter Namespace is required."),
    ("no statistic", {"Statistic": None}, "MissingParameter", "Statistic or ExtendedStatistic is required"),
    ("both statistics", {"ExtendedStatistic": "p99"}, "InvalidParameterCombination", "mutually exclusive"),
    ("a median", {"Statistic": "Median"}, "InvalidParameterValue", "The value Median for parameter Statistic"),
    ("a trimmed mean", {"Statistic": None, "ExtendedStatistic": "tm90"}, "InvalidParameterValue",
     "not one trainmon computes"),
    ("p101", {"Statistic": None, "ExtendedStatistic": "p101"}, "InvalidParameterValue", "ExtendedStatistic"),
    ("no period", {"Period": None}, "MissingParameter", "The parameter Period is required."),
    ("45 s", {"Period": 45}, "InvalidParameterValue", "The value 45 for parameter Period is not valid"),
    ("5 s", {"Period": 5}, "InvalidParameterValue", "10, 20 or 30 seconds"),
    ("a unit of no one", {"Unit": "Furlongs"}, "InvalidParameterValue", "not a valid unit"),
    ("a dimension without value", {"Dimensions": [{"Name": "Run"}]}, "MissingParameter", "Dimensions.member.1.Value"),
    ("no evaluation periods", {"EvaluationPeriods": None}, "MissingParameter", "EvaluationPeriods is required"),
    ("zero evaluation periods", {"EvaluationPeriods": 0}, "InvalidParameterValue", "positive integer"),
    ("M above N", {"DatapointsToAlarm": 2}, "InvalidParameterValue",
     "The value 2 for parameter DatapointsToAlarm must not be greater than EvaluationPeriods (1)."),
    ("over a day", {"EvaluationPeriods": 1441}, "InvalidParameterValue",
     "Metrics cannot be checked across more than a day (EvaluationPeriods * Period must be <= 86400)."),
    ("over a week", {"Period": 3600, "EvaluationPeriods": 169}, "InvalidParameterValue", "more than a week"),
    ("no threshold", {"Threshold": None}, "MissingParameter", "The parameter Threshold is required."),
    ("a NaN threshold", {"Threshold": math.nan}, "InvalidParameterValue", "Threshold must be a finite number"),
    ("no comparison", {"ComparisonOperator": None}, "MissingParameter", "ComparisonOperator is required"),
    ("an anomaly band", {"ComparisonOperator": "GreaterThanUpperThreshold"}, "InvalidParameterValue",
     "anomaly detection band"),
    ("an unknown comparison", {"ComparisonOperator": "Bigger"}, "InvalidParameterValue",
     "The value Bigger for parameter ComparisonOperator is not valid"),
    ("a threshold metric", {"ThresholdMetricId": "ad1"}, "InvalidParameterValue", "ANOMALY_DETECTION_BAND"),
    ("a PromQL interval", {"EvaluationInterval": 60}, "InvalidParameterValue", "PromQL"),
    ("missing data as zero", {"TreatMissingData": "zero"}, "InvalidParameterValue",
     "use breaching, notBreaching, ignore or missing"),
    ("low sample count maybe", {"EvaluateLowSampleCountPercentile": "maybe"}, "InvalidParameterValue",
     "EvaluateLowSampleCountPercentile"),
    ("a tag without key", {"Tags": [{"Value": "v"}]}, "MissingParameter", "Tags.member.1.Key"),
    ("an unknown member", {"Colour": "red"}, "InvalidParameterValue", "Unknown parameter(s): Colour"),
    ("metrics and a metric", {"Metrics": [{"Id": "m1", "MetricStat": STAT}]}, "InvalidParameterCombination",
     "The parameter Metrics cannot be used with MetricName, Namespace, Statistic, Period"),
]
INVALID_MATH: list[tuple[str, list[dict[str, Any]], str, str]] = [
    ("two returned", [{"Id": "m1", "MetricStat": STAT}, {"Id": "e1", "Expression": "m1 * 2"}],
     "InvalidParameterValue", "Exactly one element of the metrics list should return data"),
    ("none returned", [{"Id": "m1", "MetricStat": STAT, "ReturnData": False}], "InvalidParameterValue",
     "Exactly one element"),
    ("two periods", [{"Id": "m1", "MetricStat": STAT, "ReturnData": False},
                     {"Id": "m2", "MetricStat": {**STAT, "Period": 120}, "ReturnData": False},
                     {"Id": "e1", "Expression": "m1 + m2"}], "InvalidParameterValue", "same period"),
    ("eleven metrics", [{"Id": f"m{i}", "MetricStat": STAT, "ReturnData": False} for i in range(11)]
     + [{"Id": "e1", "Expression": "SUM(METRICS())"}], "InvalidParameterValue", "at most 10 metrics"),
    ("a syntax error", [{"Id": "m1", "MetricStat": STAT, "ReturnData": False}, {"Id": "e1", "Expression": "m1 *"}],
     "InvalidParameterValue", "Metrics.member.2.Expression"),
    ("an unknown id", [{"Id": "m1", "MetricStat": STAT, "ReturnData": False}, {"Id": "e1", "Expression": "m2 * 2"}],
     "InvalidParameterValue", "unknown Id 'm2'"),
    ("a number", [{"Id": "m1", "MetricStat": STAT, "ReturnData": False}, {"Id": "e1", "Expression": "AVG(m1)"}],
     "InvalidParameterValue", "its result is a number"),
    ("a 5 s metric", [{"Id": "m1", "MetricStat": {**STAT, "Period": 5}}], "InvalidParameterValue",
     "Metrics.member.1.MetricStat.Period"),
    ("no id", [{"MetricStat": STAT}], "MissingParameter", "The parameter Metrics.member.1.Id is required."),
]


def error_of(call: Callable[[], Any]) -> TrainmonError:
    with pytest.raises(TrainmonError) as caught:
        call()
    return caught.value


@pytest.mark.parametrize(("case", "changes", "code", "message"), INVALID_PUTS, ids=[c[0] for c in INVALID_PUTS])
def test_put_metric_alarm_refuses_what_cloudwatch_refuses(store: Store, case: str, changes: dict[str, Any],
                                                          code: str, message: str) -> None:
    request = {key: value for key, value in {**BASE, **changes}.items() if value is not None}
    error = error_of(lambda: cloudwatch(store).put_metric_alarm(**request))
    assert (error.code, error.response["Error"]["Code"]) == (code, code)
    assert message in error.message
    assert cloudwatch(store).describe_alarms()["MetricAlarms"] == []


@pytest.mark.parametrize(("case", "metrics", "code", "message"), INVALID_MATH, ids=[c[0] for c in INVALID_MATH])
def test_metric_math_alarms_refuse_what_cannot_be_watched(store: Store, case: str, metrics: list[dict[str, Any]],
                                                          code: str, message: str) -> None:
    error = error_of(lambda: cloudwatch(store).put_metric_alarm(**MATH, Metrics=metrics))
    assert error.code == code and message in error.message


@pytest.mark.parametrize(("operation", "request_", "code", "message"), [
    ("describe_alarms", {"AlarmNames": ["a"], "AlarmNamePrefix": "a"}, "InvalidParameterCombination",
     "mutually exclusive"),
    ("describe_alarms", {"StateValue": "RED"}, "InvalidParameterValue", "use OK, ALARM or INSUFFICIENT_DATA"),
    ("describe_alarms", {"MaxRecords": 101}, "InvalidParameterValue", "MaxRecords must be an integer from 1 to 100"),
    ("describe_alarms", {"NextToken": "garbage"}, "InvalidNextToken", "The next token specified is invalid."),
    ("describe_alarms", {"AlarmTypes": ["Alarm"]}, "InvalidParameterValue", "CompositeAlarm and MetricAlarm"),
    ("describe_alarms", {"ChildrenOfAlarmName": "a", "StateValue": "OK"}, "InvalidParameterCombination",
     "ChildrenOfAlarmName goes with no other parameter"),
    ("describe_alarms", {"AlarmNames": ["a"] * 101}, "InvalidParameterValue", "at most 100 alarm names"),
    ("delete_alarms", {}, "MissingParameter", "The parameter AlarmNames is required."),
    ("set_alarm_state", {"AlarmName": "nobody", "StateValue": "OK", "StateReason": "r"}, "ResourceNotFound",
     "Alarm nobody not found"),
    ("set_alarm_state", {"AlarmName": "a", "StateValue": "OK"}, "MissingParameter", "StateReason is required"),
    ("set_alarm_state", {"AlarmName": "a", "StateValue": "GREEN", "StateReason": "r"}, "InvalidParameterValue",
     "StateValue"),
    ("set_alarm_state", {"AlarmName": "a", "StateValue": "OK", "StateReason": "r", "StateReasonData": "{no"},
     "InvalidFormat", "StateReasonData must be JSON"),
    ("describe_alarm_history", {"HistoryItemType": "Everything"}, "InvalidParameterValue", "HistoryItemType"),
    ("describe_alarm_history", {"ScanBy": "Sideways"}, "InvalidParameterValue", "ScanBy"),
    ("describe_alarm_history", {"StartDate": 2000, "EndDate": 1000}, "InvalidParameterValue",
     "StartDate must not be after EndDate"),
    ("describe_alarm_history", {"NextToken": "garbage"}, "InvalidNextToken", "invalid"),
    ("describe_alarms_for_metric", {"MetricName": "loss"}, "MissingParameter", "Namespace is required"),
    ("enable_alarm_actions", {}, "MissingParameter", "AlarmNames is required"),
    ("disable_alarm_actions", {"AlarmNames": "a"}, "InvalidParameterValue", "AlarmNames must be a list"),
])
def test_the_other_operations_refuse_with_cloudwatch_codes(store: Store, operation: str, request_: dict[str, Any],
                                                           code: str, message: str) -> None:
    cloudwatch(store).put_metric_alarm(**BASE)
    error = error_of(lambda: getattr(cloudwatch(store), operation)(**request_))
    assert error.code == code and message in error.message
    if code == "ResourceNotFound":
        assert error.http_status == 404


# -- the store, both backends ---------------------------------------------------------------------


def test_alarms_and_their_history_in_either_store(any_store: Store) -> None:
    cw = cloudwatch(any_store)
    for name in ("b-2", "a-1", "b-1", "c"):
        cw.put_metric_alarm(**{**BASE, "AlarmName": name, "AlarmActions": [f"https://example.invalid/{name}"]},
                            Tags=[{"Key": "team", "Value": "vision"}])
    first = cw.describe_alarms(MaxRecords=2)
    assert [a["AlarmName"] for a in first["MetricAlarms"]] == ["a-1", "b-1"] and first["CompositeAlarms"] == []
    rest = cw.describe_alarms(MaxRecords=2, NextToken=first["NextToken"])
    assert [a["AlarmName"] for a in rest["MetricAlarms"]] == ["b-2", "c"] and "NextToken" not in rest
    assert [a["AlarmName"] for a in cw.describe_alarms(AlarmNamePrefix="b-")["MetricAlarms"]] == ["b-1", "b-2"]
    assert [a["AlarmName"] for a in cw.describe_alarms(ActionPrefix="https://example.invalid/b")["MetricAlarms"]] \
        == ["b-1", "b-2"]
    assert cw.describe_alarms(StateValue="ALARM")["MetricAlarms"] == []
    alarm = described(any_store, "c")
    assert alarm["AlarmArn"] == "arn:aws:cloudwatch:local:000000000000:alarm:c"
    assert (alarm["StateValue"], alarm["StateReason"]) == ("INSUFFICIENT_DATA", "Unchecked: Initial alarm creation")
    assert alarm["StateUpdatedTimestamp"].tzinfo is not None and "Tags" not in alarm
    assert (alarm["Dimensions"], alarm["ActionsEnabled"], alarm["OKActions"]) == ([], True, [])

    cw.put_metric_alarm(**{**BASE, "AlarmName": "c", "Threshold": 7.5, "AlarmActions": ["https://example.invalid/c"]})
    cw.set_alarm_state(AlarmName="c", StateValue="ALARM", StateReason="a test", StateReasonData='{"why": 1}')
    assert notify.flush()  # the action's item is written once its delivery has ended (here: failed)
    cw.put_metric_alarm(**{**BASE, "AlarmName": "c", "Threshold": 8.0})  # a whole new configuration, the same state
    alarm = described(any_store, "c")
    assert (alarm["Threshold"], alarm["StateValue"], alarm["StateReason"]) == (8.0, "ALARM", "a test")
    assert alarm["AlarmActions"] == []
    assert alarm["StateReasonData"] == '{"why": 1}'
    cw.disable_alarm_actions(AlarmNames=["c", "nobody"])
    assert described(any_store, "c")["ActionsEnabled"] is False
    cw.delete_alarms(AlarmNames=["c", "nobody"])
    assert cw.describe_alarms(AlarmNames=["c"])["MetricAlarms"] == []

    items = cw.describe_alarm_history(AlarmName="c", ScanBy="TimestampAscending")["AlarmHistoryItems"]
    assert [(i["HistoryItemType"], i["HistorySummary"].split(". Received error")[0]) for i in items] == [
        ("ConfigurationUpdate", 'Alarm "c" created'), ("ConfigurationUpdate", 'Alarm "c" updated'),
        ("StateUpdate", "Alarm updated from INSUFFICIENT_DATA to ALARM"),
        ("Action", "Failed to execute action https://example.invalid/c"),
        ("ConfigurationUpdate", 'Alarm "c" updated'), ("ConfigurationUpdate", 'Alarm "c" updated'),
        ("ConfigurationUpdate", 'Alarm "c" deleted')]
    failed = json.loads(items[3]["HistoryData"])
    assert (failed["actionState"], failed["notificationResource"]) == ("Failed", "https://example.invalid/c")
    assert failed["error"] and json.loads(failed["publishedMessage"])["NewStateValue"] == "ALARM"
    assert {i["AlarmType"] for i in items} == {"MetricAlarm"}
    update = json.loads(items[1]["HistoryData"])
    assert (update["type"], update["originalAlarm"]["threshold"], update["updatedAlarm"]["threshold"]) == (
        "Update", 1.0, 7.5)
    assert json.loads(items[2]["HistoryData"])["newState"] == {"stateValue": "ALARM", "stateReason": "a test",
                                                               "stateReasonData": {"why": 1}}
    assert json.loads(items[-1]["HistoryData"])["deletedAlarm"]["alarmName"] == "c"
    pages, token = [], None
    while True:
        page = cw.describe_alarm_history(MaxRecords=3, **({"NextToken": token} if token else {}))
        pages.append(page["AlarmHistoryItems"])
        token = page.get("NextToken")
        if not token:
            break
    everything = [item for page in pages for item in page]
    assert len(everything) == 3 + len(items) and all(len(page) <= 3 for page in pages)
    stamps = [item["Timestamp"] for item in everything]
    assert stamps == sorted(stamps, reverse=True)
    assert len(cw.describe_alarm_history(HistoryItemType="Action")["AlarmHistoryItems"]) == 1
    assert cw.describe_alarm_history(AlarmTypes=["CompositeAlarm"])["AlarmHistoryItems"] == []
    assert any_store.expire_alarm_history(int(time.time() * 1000) + 1000) == len(everything)


def test_each_slot_of_an_alarm_is_evaluated_once_however_many_evaluate(store_target: StoreTarget) -> None:
    stores = [store_target.open() for _ in range(4)]
    try:
        for index in range(40):
            cloudwatch(stores[0]).put_metric_alarm(**{**BASE, "AlarmName": f"a{index:02d}"})
        now_ms = 1_800_000_000_000 + 5_000
        claimed: list[list[str]] = [[] for _ in stores]
        start = threading.Barrier(len(stores))

        def claim(index: int) -> None:
            start.wait()
            claimed[index] = [alarm.name for alarm in stores[index].claim_due_alarms(now_ms)]

        threads = [threading.Thread(target=claim, args=(index,)) for index in range(len(stores))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        every = sorted(name for names in claimed for name in names)
        assert every == [f"a{index:02d}" for index in range(40)]  # each once, between them all
        assert stores[1].claim_due_alarms(now_ms + 54_000) == []  # the next slot is the next minute
        assert len(stores[2].claim_due_alarms(now_ms + 55_000)) == 40
    finally:
        for store in stores:
            store.close()


def test_an_evaluation_never_overwrites_a_change_made_meanwhile(any_store: Store) -> None:
    cloudwatch(any_store).put_metric_alarm(**BASE)
    [claimed] = any_store.claim_due_alarms(int(time.time() * 1000))
    cloudwatch(any_store).set_alarm_state(AlarmName="a", StateValue="ALARM", StateReason="by hand")
    claimed.state, claimed.reason = "OK", "a stale evaluation"
    assert any_store.record_evaluations([(claimed, [])]) == []
    assert described(any_store, "a")["StateReason"] == "by hand"


def test_an_m_of_n_alarm_on_put_data_in_either_store(any_store: Store, tmp_path: Path) -> None:
    cw = cloudwatch(any_store)
    action, folder = recorder(tmp_path, "alarm")
    minute = math.floor(time.time() / 60) * 60 - 900
    values = [1.0, 9.0, 1.0, 9.0, 9.0, 1.0, 1.0, 1.0]  # one a minute from `minute` on
    cw.put_metric_data(Namespace="Team", MetricData=[
        {"MetricName": "latency", "Dimensions": [{"Name": "Service", "Value": "api"}], "Value": value,
         "Unit": "Milliseconds", "Timestamp": minute + 60 * index + 30} for index, value in enumerate(values)])
    cw.put_metric_alarm(AlarmName="slow", Namespace="Team", MetricName="latency", Statistic="Maximum",
                        Dimensions=[{"Name": "Service", "Value": "api"}], Period=60, EvaluationPeriods=3,
                        DatapointsToAlarm=2, Threshold=5.0, ComparisonOperator="GreaterThanThreshold",
                        Unit="Milliseconds", AlarmActions=[action])
    seen = []
    for index in range(2, len(values) + 1):  # at the end of each minute, from the second
        evaluate_alarms(any_store, minute + 60 * index + 1)
        seen.append(described(any_store, "slow")["StateValue"])
    # minutes evaluated: [1 9] -> 1 of 2 real (missing: OK); [1 9 1]; [9 1 9]; [1 9 9]; [9 9 1]; [9 1 1]; [1 1 1]
    assert seen == ["OK", "OK", "ALARM", "ALARM", "ALARM", "OK", "OK"]
    alarm = described(any_store, "slow")
    data = json.loads(alarm["StateReasonData"])
    assert (data["statistic"], data["unit"], data["period"], data["recentDatapoints"]) == (
        "Maximum", "Milliseconds", 60, [9.0, 1.0, 1.0])
    assert alarm["StateReason"].endswith("were not greater than the threshold (5.0) (minimum 2 datapoints for "
                                         "ALARM -> OK transition).")
    assert state_changes(any_store, "slow") == ["Alarm updated from INSUFFICIENT_DATA to OK",
                                                "Alarm updated from OK to ALARM", "Alarm updated from ALARM to OK"]
    [sent] = payloads(folder)
    assert (sent["OldStateValue"], sent["NewStateValue"], sent["Trigger"]["Statistic"]) == ("OK", "ALARM", "MAXIMUM")
    assert sent["Trigger"]["Dimensions"] == [{"value": "api", "name": "Service"}]


# -- evaluated in the background, on a manual clock: a real job's metric --------------------------

JOB = """
for loss in (0.9, 0.7, 2.5, 0.6):
    print(f"step loss={loss};", flush=True)
"""


def test_an_alarm_on_a_jobs_metric_goes_ok_alarm_ok_and_runs_its_actions(home: Path, store: Store,
                                                                          script: Callable[[str], Path],
                                                                          tmp_path: Path) -> None:
    run_cli("run", "--name", "watched", "--metric", r"loss=loss=(\S+);", "--", PY, str(script(JOB)), check=True)
    job = store.get_job("watched")
    assert job is not None
    stamps = [point.timestamp_ms for point in store.points(job.id)]
    assert len(stamps) == 4
    alarm_action, alarm_folder = recorder(tmp_path, "alarm")
    ok_action, ok_folder = recorder(tmp_path, "ok")
    cw = cloudwatch(store)
    cw.put_metric_alarm(AlarmName="loss-spike", AlarmDescription="the loss jumped", Namespace=JOB_NAMESPACE,
                        MetricName="loss", Dimensions=[{"Name": "TrainingJobName", "Value": "watched"}],
                        Statistic="Maximum", Period=10, EvaluationPeriods=1, Threshold=1.0,
                        ComparisonOperator="GreaterThanThreshold", TreatMissingData="notBreaching",
                        AlarmActions=[alarm_action], OKActions=[ok_action])

    first_slot_s = min(stamps) // 10_000 * 10  # its range (3 periods of 10 s) ends where the job's points begin
    clock = ManualClock(wall_s=first_slot_s)
    maintainer = Maintainer(store, first_after_s=0, alarm_pass=evaluate_alarms, clock=clock)
    clock.start(maintainer)  # the first pass: no datapoint yet, and missing ones are not breaching
    try:
        assert described(store, "loss-spike")["StateValue"] == "OK"
        clock.advance(10)  # the points' first 10 s are in the range now
        alarm = described(store, "loss-spike")
        assert alarm["StateValue"] == "ALARM"
        assert alarm["StateReason"].startswith("Threshold Crossed: 1 out of the last 1 datapoints [2.5 (")
        while clock.wall() < max(stamps) / 1000 + 40:  # until the range has moved past the job's points
            clock.advance(10)
        assert described(store, "loss-spike")["StateValue"] == "OK"
    finally:
        maintainer.stop()
    assert maintainer.alarm_error is None and maintainer.error is None
    assert maintainer.alarm_passes[-1].evaluated == 1
    assert state_changes(store, "loss-spike") == ["Alarm updated from INSUFFICIENT_DATA to OK",
                                                  "Alarm updated from OK to ALARM", "Alarm updated from ALARM to OK"]
    assert notify.flush()
    actions = cw.describe_alarm_history(AlarmName="loss-spike", HistoryItemType="Action")["AlarmHistoryItems"]
    assert len(actions) == 3 and json.loads(actions[0]["HistoryData"])["notificationResource"] == ok_action
    assert [json.loads(a["HistoryData"])["actionState"] for a in actions] == ["Succeeded"] * 3
    assert actions[0]["HistorySummary"] == f"Successfully executed action {ok_action}"

    [raised] = payloads(alarm_folder)
    assert (raised["AlarmName"], raised["OldStateValue"], raised["NewStateValue"]) == ("loss-spike", "OK", "ALARM")
    assert raised["AlarmDescription"] == "the loss jumped" and raised["AlarmArn"].endswith(":alarm:loss-spike")
    assert raised["NewStateReason"] == alarm["StateReason"] and raised["AWSAccountId"] == "000000000000"
    assert raised["Trigger"] == {
        "MetricName": "loss", "Namespace": JOB_NAMESPACE, "StatisticType": "Statistic", "Statistic": "MAXIMUM",
        "Unit": None, "Dimensions": [{"value": "watched", "name": "TrainingJobName"}], "Period": 10,
        "EvaluationPeriods": 1, "ComparisonOperator": "GreaterThanThreshold", "Threshold": 1.0,
        "TreatMissingData": "notBreaching", "EvaluateLowSampleCountPercentile": ""}
    assert raised["AlarmActions"] == [alarm_action] and raised["OKActions"] == [ok_action]
    assert [(p["OldStateValue"], p["NewStateValue"]) for p in payloads(ok_folder)] == [
        ("INSUFFICIENT_DATA", "OK"), ("ALARM", "OK")]
    assert raised["StateChangeTime"].endswith("+0000")


def test_alarms_are_evaluated_at_cloudwatchs_cadence(store: Store) -> None:
    cw = cloudwatch(store)
    cw.put_metric_alarm(**{**BASE, "AlarmName": "minutely", "TreatMissingData": "notBreaching"})
    cw.put_metric_alarm(**{**BASE, "AlarmName": "high-resolution", "Period": 10, "TreatMissingData": "notBreaching"})
    clock = ManualClock(wall_s=math.floor(time.time() / 60) * 60 - 3600)  # at a minute, an hour ago
    maintainer = Maintainer(store, first_after_s=0, alarm_pass=evaluate_alarms, clock=clock)
    clock.start(maintainer)
    try:
        for _ in range(6):
            clock.advance(10)
    finally:
        maintainer.stop()
    # passes at 0, 10, ... 60 s: the high-resolution alarm in each, the other at 0 s and 60 s
    assert [done.evaluated for done in maintainer.alarm_passes] == [2, 1, 1, 1, 1, 1, 2]
    assert {described(store, name)["StateValue"] for name in ("minutely", "high-resolution")} == {"OK"}


def test_a_metric_math_alarm(store: Store, tmp_path: Path) -> None:
    cw = cloudwatch(store)
    minute = math.floor(time.time() / 60) * 60 - 600
    run = [{"Name": "Run", "Value": "r1"}]
    errors, requests = [0, 1, 30, 40, 2], [100, 100, 100, 100, 100]  # a minute each: 0%, 1%, 30%, 40%, 2%
    cw.put_metric_data(Namespace="Serve", MetricData=[
        {"MetricName": name, "Dimensions": run, "Value": float(value), "Timestamp": minute + 60 * index + 10}
        for name, series in (("errors", errors), ("requests", requests)) for index, value in enumerate(series)])

    def stat(name: str) -> dict[str, Any]:
        return {"Metric": {"Namespace": "Serve", "MetricName": name, "Dimensions": run}, "Period": 60, "Stat": "Sum"}

    cw.put_metric_alarm(AlarmName="error-rate", EvaluationPeriods=2, Threshold=10.0,
                        ComparisonOperator="GreaterThanOrEqualToThreshold", Metrics=[
                            {"Id": "e", "MetricStat": stat("errors"), "ReturnData": False},
                            {"Id": "r", "MetricStat": stat("requests"), "ReturnData": False},
                            {"Id": "rate", "Expression": "100 * e / r", "Label": "error rate", "ReturnData": True}])
    seen = []
    for index in range(2, 6):
        evaluate_alarms(store, minute + 60 * index + 1)
        seen.append(described(store, "error-rate")["StateValue"])
    assert seen == ["OK", "OK", "ALARM", "OK"]  # [0 1], [1 30], [30 40], [40 2]
    alarm = described(store, "error-rate")
    assert alarm["Metrics"][2]["Expression"] == "100 * e / r" and "Period" not in alarm
    data = json.loads(alarm["StateReasonData"])
    assert "statistic" not in data and data["period"] == 60 and data["recentDatapoints"] == [40.0, 2.0]
    assert "sampleCount" not in data["evaluatedDatapoints"][0]
    assert cw.describe_alarms_for_metric(Namespace="Serve", MetricName="errors", Dimensions=run)["MetricAlarms"] == []


def test_an_expression_that_gives_several_series_is_an_evaluation_error(store: Store) -> None:
    cw = cloudwatch(store)
    stat = {"Metric": {"Namespace": "Serve", "MetricName": "errors"}, "Period": 60, "Stat": "Sum"}
    cw.put_metric_alarm(AlarmName="many", EvaluationPeriods=1, Threshold=1.0,
                        ComparisonOperator="GreaterThanThreshold", Metrics=[
                            {"Id": "a", "MetricStat": stat, "ReturnData": False},
                            {"Id": "b", "MetricStat": stat, "ReturnData": False},
                            {"Id": "both", "Expression": "METRICS() * 2"}])
    evaluate_alarms(store, time.time())
    alarm = described(store, "many")
    assert (alarm["StateValue"], alarm["EvaluationState"]) == ("INSUFFICIENT_DATA", "EVALUATION_ERROR")
    assert alarm["StateReason"].startswith("Evaluation error: the returned query of Metrics gave 2 time series")


def test_a_percentile_alarm_waits_for_enough_samples_when_asked_to(store: Store) -> None:
    cw = cloudwatch(store)
    minute = math.floor(time.time() / 60) * 60 - 300
    cw.put_metric_data(Namespace="Team", MetricData=[
        {"MetricName": "latency", "Values": [1.0, 2.0, 50.0], "Counts": [5.0, 5.0, 2.0], "Timestamp": minute + 5}])
    common = {"Namespace": "Team", "MetricName": "latency", "ExtendedStatistic": "p99", "Period": 60,
              "EvaluationPeriods": 1, "Threshold": 10.0, "ComparisonOperator": "GreaterThanThreshold"}
    cw.put_metric_alarm(AlarmName="p99-any", **common)
    cw.put_metric_alarm(AlarmName="p99-enough", EvaluateLowSampleCountPercentile="ignore", **common)
    evaluate_alarms(store, minute + 61)
    assert described(store, "p99-any")["StateValue"] == "ALARM"  # 12 samples, p99 of them above 10
    assert described(store, "p99-enough")["StateValue"] == "INSUFFICIENT_DATA"  # fewer than 1,000 samples
    data = json.loads(described(store, "p99-any")["StateReasonData"])
    assert data["extendedStatistic"] == "p99" and data["evaluatedDatapoints"][0]["sampleCount"] == 12.0


def test_set_alarm_state_runs_the_new_states_actions_unless_they_are_disabled(store: Store, tmp_path: Path) -> None:
    cw = cloudwatch(store)
    action, folder = recorder(tmp_path, "alarm")
    cw.put_metric_alarm(**BASE, AlarmActions=[action])
    cw.set_alarm_state(AlarmName="a", StateValue="ALARM", StateReason="testing the pager")
    cw.set_alarm_state(AlarmName="a", StateValue="ALARM", StateReason="again")  # no change of state: no action
    cw.disable_alarm_actions(AlarmNames=["a"])
    cw.set_alarm_state(AlarmName="a", StateValue="OK", StateReason="quiet")
    cw.set_alarm_state(AlarmName="a", StateValue="ALARM", StateReason="quiet too")
    cw.enable_alarm_actions(AlarmNames=["a"])
    [sent] = payloads(folder)
    assert (sent["NewStateValue"], sent["NewStateReason"]) == ("ALARM", "testing the pager")
    alarm = described(store, "a")
    assert alarm["ActionsEnabled"] is True and alarm["StateReason"] == "quiet too"
    assert alarm["StateTransitionedTimestamp"] <= alarm["StateUpdatedTimestamp"]
    assert len(state_changes(store, "a")) == 4


def test_alarms_for_a_metric(store: Store) -> None:
    cw = cloudwatch(store)
    run = [{"Name": "Run", "Value": "r1"}]
    cw.put_metric_alarm(**{**BASE, "AlarmName": "avg", "Dimensions": run})
    cw.put_metric_alarm(**{**BASE, "AlarmName": "max", "Dimensions": run, "Statistic": "Maximum", "Period": 300})
    cw.put_metric_alarm(**{**BASE, "AlarmName": "other-run", "Dimensions": [{"Name": "Run", "Value": "r2"}]})
    cw.put_metric_alarm(**{**BASE, "AlarmName": "no-dimensions"})

    def names(**filters: Any) -> list[str]:
        found = cw.describe_alarms_for_metric(Namespace="Team", MetricName="loss", **filters)["MetricAlarms"]
        return [alarm["AlarmName"] for alarm in found]

    assert names(Dimensions=run) == ["avg", "max"]
    assert names(Dimensions=run, Statistic="Maximum") == ["max"]
    assert names(Dimensions=run, Period=60) == ["avg"]
    assert names() == ["no-dimensions"]


# -- the command line ---------------------------------------------------------------------------


def test_the_alarm_commands(home: Path) -> None:
    put = run_cli("alarm", "put", "cli-alarm", "--namespace", "Team", "--metric", "loss", "--dimensions", "Run=r1",
                  "--statistic", "p90", "--comparison", ">=", "--threshold", "2.5", "--evaluation-periods", "3",
                  "--datapoints-to-alarm", "2", "--ok-action", "exec:true", check=True)
    assert "alarm cli-alarm put" in put.stdout
    listed = run_cli("alarm", "list", check=True).stdout
    assert "cli-alarm" in listed and "INSUFFICIENT_DATA" in listed and "p90(loss) >= 2.5, 2 of 3 x 60 s" in listed
    [alarm] = json.loads(run_cli("alarm", "list", "--json", check=True).stdout)
    assert (alarm["ExtendedStatistic"], alarm["OKActions"], alarm["Dimensions"]) == (
        "p90", ["exec:true"], [{"Name": "Run", "Value": "r1"}])
    run_cli("alarm", "set-state", "cli-alarm", "--state", "ALARM", "--reason", "from the shell", "--reason-data",
            '{"by": "test"}', check=True)
    history = run_cli("alarm", "history", "cli-alarm", "--oldest-first", check=True).stdout
    assert history.index('Alarm "cli-alarm" created') < history.index("Alarm updated from INSUFFICIENT_DATA to ALARM")
    job = run_cli("alarm", "put", "job-alarm", "--job", "some-job", "--host", "algo-1", "--metric", "CPUUtilization",
                  "--statistic", "Maximum", "--period", "10", "--comparison", "GreaterThanThreshold", "--threshold",
                  "90", check=True)
    assert job.returncode == 0
    [watched] = [a for a in json.loads(run_cli("alarm", "list", "--json", check=True).stdout)
                 if a["AlarmName"] == "job-alarm"]
    assert (watched["Namespace"], watched["Dimensions"]) == (JOB_NAMESPACE, [{"Name": "Host",
                                                                             "Value": "some-job/algo-1"}])

    refused = run_cli("alarm", "put", "sns", "--namespace", "Team", "--metric", "loss", "--comparison", ">",
                      "--threshold", "1", "--alarm-action", ARN)
    assert refused.returncode == 2 and "trainmon: InvalidParameterValue:" in refused.stderr
    assert "exec:<command line>" in refused.stderr
    missing = run_cli("alarm", "set-state", "nobody", "--state", "OK", "--reason", "x")
    assert missing.returncode == 2 and "ResourceNotFound: Alarm nobody not found" in missing.stderr
    run_cli("alarm", "delete", "cli-alarm", "job-alarm", check=True)
    assert "no alarms yet" in run_cli("alarm", "list", check=True).stdout
    kept = json.loads(run_cli("alarm", "history", "cli-alarm", "--type", "ConfigurationUpdate", "--json",
                              check=True).stdout)
    assert kept[0]["HistorySummary"] == 'Alarm "cli-alarm" deleted'


# -- boto3 against a real server ------------------------------------------------------------------


def test_boto3_against_a_real_server(home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    server = start_server(home)
    try:
        for variable, value in (*server.aws_env().items(), ("AWS_CONFIG_FILE", str(tmp_path / "none")),
                                ("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))):
            monkeypatch.setenv(variable, value)
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # (whose credentials are another test's server's)
        cw = boto3.client("cloudwatch", config=Config(retries={"max_attempts": 1}))
        # no data and TreatMissingData ignore: the server's own evaluations keep whatever state is set
        quiet = {**BASE, "TreatMissingData": "ignore", "Dimensions": [{"Name": "Run", "Value": "wire"}]}
        for index in range(5):
            cw.put_metric_alarm(**{**quiet, "AlarmName": f"wire-{index}"}, AlarmActions=["https://example.invalid/"])
        cw.put_metric_alarm(AlarmName="wire-math", EvaluationPeriods=1, Threshold=1.0,
                            ComparisonOperator="LessThanThreshold", TreatMissingData="ignore", Metrics=[
                                {"Id": "m", "MetricStat": STAT, "ReturnData": False},
                                {"Id": "e", "Expression": "FILL(m, 0) + 1", "Label": "one more"}])
        pages = cw.get_paginator("describe_alarms").paginate(PaginationConfig={"PageSize": 2})
        alarms = [alarm for page in pages for alarm in page["MetricAlarms"]]
        assert [alarm["AlarmName"] for alarm in alarms] == [f"wire-{i}" for i in range(5)] + ["wire-math"]
        assert alarms[0]["StateUpdatedTimestamp"].tzinfo is not None and alarms[0]["Threshold"] == 1.0
        assert alarms[-1]["Metrics"][1] == {"Id": "e", "Expression": "FILL(m, 0) + 1", "Label": "one more",
                                            "ReturnData": True}
        for_metric = cw.describe_alarms_for_metric(Namespace="Team", MetricName="loss",
                                                   Dimensions=[{"Name": "Run", "Value": "wire"}])
        assert len(for_metric["MetricAlarms"]) == 5
        cw.set_alarm_state(AlarmName="wire-0", StateValue="ALARM", StateReason="over the wire",
                           StateReasonData='{"source": "boto3"}')
        alarm = cw.describe_alarms(AlarmNames=["wire-0"])["MetricAlarms"][0]
        assert (alarm["StateValue"], alarm["StateReasonData"]) == ("ALARM", '{"source": "boto3"}')
        assert cw.describe_alarms(StateValue="ALARM")["MetricAlarms"][0]["AlarmName"] == "wire-0"
        cw.disable_alarm_actions(AlarmNames=["wire-1"])
        cw.enable_alarm_actions(AlarmNames=["wire-1"])
        deadline = time.monotonic() + 60
        while True:  # the action's item comes once the server's delivery has ended (it fails: no such host)
            history = cw.describe_alarm_history(AlarmName="wire-0")["AlarmHistoryItems"]
            if len(history) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert [item["HistoryItemType"] for item in history] == ["Action", "StateUpdate", "ConfigurationUpdate"]
        assert history[0]["HistorySummary"].startswith("Failed to execute action https://example.invalid/")
        assert history[1]["HistorySummary"] == "Alarm updated from INSUFFICIENT_DATA to ALARM"
        assert history[0]["Timestamp"].tzinfo is not None
        items = [item for page in cw.get_paginator("describe_alarm_history").paginate(
            HistoryItemType="ConfigurationUpdate", PaginationConfig={"PageSize": 3}) for item in page["AlarmHistoryItems"]]
        assert len(items) == 6 + 2
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            cw.set_alarm_state(AlarmName="nobody", StateValue="OK", StateReason="x")
        assert caught.value.response["Error"]["Code"] == "ResourceNotFound"
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        with pytest.raises(cw.exceptions.InvalidFormatFault):
            cw.set_alarm_state(AlarmName="wire-0", StateValue="OK", StateReason="x", StateReasonData="{")
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            cw.put_metric_alarm(**{**quiet, "AlarmName": "sns"}, AlarmActions=[ARN])
        assert caught.value.response["Error"]["Code"] == "InvalidParameterValue"
        assert "is an action trainmon cannot run" in caught.value.response["Error"]["Message"]
        cw.delete_alarms(AlarmNames=[f"wire-{i}" for i in range(5)] + ["wire-math"])
        assert cw.describe_alarms()["MetricAlarms"] == []
    finally:
        server.stop()
