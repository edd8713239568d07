"""GetMetricData and metric math over the store, checked against values computed here with numpy."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

import trainmon
from trainmon.cloudwatch.sketch import RELATIVE_ACCURACY
from trainmon.errors import InvalidParameterCombination, InvalidParameterValue, MissingParameter, TrainmonError

from .conftest import PY, run_cli

NS = "Math"
DIMS = [{"Name": "Run", "Value": "r1"}]
Results = list[dict[str, Any]]


@pytest.fixture
def cw(home):
    return trainmon.client("cloudwatch")


def minute_start(minutes_ago: int = 60) -> int:
    """A whole minute ``minutes_ago`` minutes back: inside every age rule for Period 60."""
    return int(datetime.now(UTC).timestamp() // 60 * 60) - minutes_ago * 60


def put(cw, name: str, points: dict[float, float], *, dims=DIMS, resolution: int = 60, unit: str | None = None) -> None:
    """Put one value per timestamp (epoch seconds)."""
    items = [{"MetricName": name, "Dimensions": dims, "Value": v, "Timestamp": t, "StorageResolution": resolution,
              **({"Unit": unit} if unit else {})} for t, v in points.items()]
    for offset in range(0, len(items), 1000):
        cw.put_metric_data(Namespace=NS, MetricData=items[offset:offset + 1000])


def put_minutes(cw, name: str, start: int, values: dict[int, float], **kwargs: Any) -> None:
    """Put ``values`` by minute index after ``start``."""
    put(cw, name, {start + 60 * i: v for i, v in values.items()}, **kwargs)


def stat(query_id: str, name: str = "loss", statistic: str = "Average", period: int = 60, dims=DIMS,
         unit: str | None = None, **extra: Any) -> dict[str, Any]:
    metric = {"Namespace": NS, "MetricName": name, "Dimensions": dims}
    return {"Id": query_id, "MetricStat": {"Metric": metric, "Period": period, "Stat": statistic,
                                           **({"Unit": unit} if unit else {})}, **extra}


def expr(query_id: str, expression: str, **extra: Any) -> dict[str, Any]:
    return {"Id": query_id, "Expression": expression, **extra}


def fetch(cw, queries: list[dict[str, Any]], start: float, end: float, **kwargs: Any) -> Results:
    response = cw.get_metric_data(MetricDataQueries=queries, StartTime=start, EndTime=end, **kwargs)
    assert "NextToken" not in response and response["Messages"] == []
    return response["MetricDataResults"]


def one(results: Results, query_id: str) -> dict[str, Any]:
    (found,) = [r for r in results if r["Id"] == query_id]
    return found


def points(result: dict[str, Any]) -> dict[float, float]:
    """A result's values by epoch second; timestamps must be timezone-aware UTC datetimes."""
    assert len(result["Timestamps"]) == len(result["Values"])
    assert all(t.tzinfo is not None and t.utcoffset().total_seconds() == 0 for t in result["Timestamps"])
    return {t.timestamp(): v for t, v in zip(result["Timestamps"], result["Values"], strict=True)}


def by_minute(start: int, values: dict[int, float]) -> dict[float, float]:
    return {float(start + 60 * i): v for i, v in values.items()}


# -- MetricStat: the same numbers as GetMetricStatistics ------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_every_statistic_matches_numpy_per_period(cw, seed: int) -> None:
    rng = np.random.default_rng(seed)
    start = minute_start(40)
    times = start + np.arange(900) * 1.7
    values = rng.uniform(0, 100, size=900).round(3)
    put(cw, "loss", dict(zip(times.tolist(), values.tolist(), strict=True)), resolution=1)
    period = int(rng.choice([60, 120, 300]))
    names = {"n": "SampleCount", "avg": "Average", "total": "Sum", "low": "Minimum", "high": "Maximum",
             "p50": "p50", "p999": "p99.9"}
    results = fetch(cw, [stat(i, statistic=s, period=period) for i, s in names.items()], start, start + 1800)
    expected_slots = sorted({int((t - start) // period) for t in times[times < start + 1800]})
    for query_id, statistic in names.items():
        got = points(one(results, query_id))
        assert list(got) == [start + i * period for i in reversed(expected_slots)]  # newest first by default
        for index in expected_slots:
            chosen = values[(times >= start + index * period) & (times < start + (index + 1) * period)]
            if statistic in ("p50", "p99.9"):  # from the roll-ups: within 1% of the value of rank floor(q * (n - 1))
                true = np.sort(chosen)[math.floor(float(statistic[1:]) / 100.0 * (len(chosen) - 1))]
                assert got[start + index * period] == pytest.approx(true, rel=RELATIVE_ACCURACY)
                continue
            want = {"SampleCount": len(chosen), "Average": chosen.mean(), "Sum": chosen.sum(), "Minimum": chosen.min(),
                    "Maximum": chosen.max()}[statistic]
            assert got[start + index * period] == pytest.approx(want)
    statistics = cw.get_metric_statistics(Namespace=NS, MetricName="loss", Dimensions=DIMS, StartTime=start,
                                          EndTime=start + 1800, Period=period, Statistics=["Average"])
    assert {p["Timestamp"].timestamp(): p["Average"] for p in statistics["Datapoints"]} == points(one(results, "avg"))


def test_scan_by_orders_the_timestamps(cw) -> None:
    start = minute_start(30)
    put_minutes(cw, "loss", start, {i: float(i) for i in range(10)})
    descending = fetch(cw, [stat("m")], start, start + 600)[0]["Timestamps"]
    ascending = fetch(cw, [stat("m")], start, start + 600, ScanBy="TimestampAscending")[0]["Timestamps"]
    assert descending == sorted(descending, reverse=True) and len(descending) == 10
    assert ascending == sorted(descending)
    assert fetch(cw, [stat("m")], start, start + 600, ScanBy="TimestampDescending")[0]["Timestamps"] == descending


def test_units_and_age_rules_are_those_of_get_metric_statistics(cw) -> None:
    start = minute_start(30)
    put(cw, "loss", {start + 1: 1.0}, unit="Seconds")
    put(cw, "loss", {start + 2: 5.0}, unit="Count")
    queries = [stat("merged", statistic="Sum"), stat("seconds", statistic="Sum", unit="Seconds"),
               stat("bytes", statistic="Sum", unit="Bytes")]
    merged, seconds, bytes_ = fetch(cw, queries, start, start + 60)
    assert merged["Values"] == [6.0] and seconds["Values"] == [1.0] and bytes_["Values"] == []
    old = minute_start(4 * 60)
    put(cw, "old", {old + 5: 1.0}, resolution=1)
    (high_res, minute) = fetch(cw, [stat("a", "old", period=10), stat("b", "old", period=60)], old, old + 600)
    assert high_res["Values"] == [] and minute["Values"] == [1.0]  # older than 3 h: Period must be a multiple of 60


def test_training_job_metrics_are_served(home, cw, script) -> None:
    train = script(
        """
        for loss in (0.5, 0.25, 0.125):
            print(f"loss={loss}")
        """
    )
    run_cli("run", "--name", "math-job", "--metric", r"train:loss=loss=(\S+)", "--", PY, str(train), check=True)
    job = trainmon.client("sagemaker").describe_training_job(TrainingJobName="math-job")
    metric = {"Namespace": "/aws/sagemaker/TrainingJobs", "MetricName": "train:loss",
              "Dimensions": [{"Name": "TrainingJobName", "Value": "math-job"}]}
    start = job["TrainingStartTime"].timestamp() // 60 * 60
    end = job["TrainingEndTime"].timestamp() + 60
    results = cw.get_metric_data(MetricDataQueries=[
        {"Id": "loss", "MetricStat": {"Metric": metric, "Period": 60, "Stat": "Average"}},
        {"Id": "n", "MetricStat": {"Metric": metric, "Period": 60, "Stat": "SampleCount"}, "ReturnData": False},
        {"Id": "total", "Expression": "SUM(loss * n) + loss * 0", "Label": "${PROP('Dim.TrainingJobName')}"},
    ], StartTime=start, EndTime=end)["MetricDataResults"]
    loss, total = results
    assert loss["Label"] == "train:loss" and loss["Values"]
    assert total["Values"] == pytest.approx([0.875] * len(total["Values"])) and total["Values"]
    assert total["Label"] == "math-job"  # a series computed from a metric keeps its properties
    statistics = cw.get_metric_statistics(StartTime=start, EndTime=end, Period=60, Statistics=["Average"], **metric)
    assert points(loss) == {p["Timestamp"].timestamp(): p["Average"] for p in statistics["Datapoints"]}


# -- arithmetic --------------------------------------------------------------------------------


def test_arithmetic_keeps_the_timestamps_both_series_have(cw) -> None:
    rng = np.random.default_rng(7)
    start = minute_start(90)
    a = {i: float(rng.integers(1, 50)) for i in range(60)}
    b = {i: float(rng.integers(1, 50)) for i in range(60) if rng.random() < 0.6}
    for i in list(b)[:3]:
        b[i] = a[i]  # a - b is 0 there: dividing by it drops the point
    put_minutes(cw, "a", start, a)
    put_minutes(cw, "b", start, b)
    results = fetch(cw, [stat("ma", "a"), stat("mb", "b"), expr("e", "(ma + 2 * mb) / (ma - mb) ^ 2 - -3")],
                    start, start + 3600)
    common = sorted(set(a) & set(b))
    x, y = np.array([a[i] for i in common]), np.array([b[i] for i in common])
    with np.errstate(divide="ignore", invalid="ignore"):
        values = (x + 2 * y) / (x - y) ** 2 + 3
    expected = {float(start + 60 * i): v for i, v in zip(common, values.tolist(), strict=True) if np.isfinite(v)}
    assert len(expected) == len(common) - 3
    assert points(one(results, "e")) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("expression", "compute"),
    [
        ("-m ^ 2", lambda v: -(v**2)),  # ^ binds tighter than unary minus
        ("2 ^ 3 ^ 2 + m * 0", lambda v: 512 + v * 0),  # ^ is right-associative
        ("m - 1 - 2", lambda v: v - 3),  # - is left-associative
        ("m / 2 / 4", lambda v: v / 8),
        ("(m + 1) * 2", lambda v: (v + 1) * 2),
        ("m + 1 * 2", lambda v: v + 2),
        ("+m - .5e1", lambda v: v - 5),
        ("100 / m", lambda v: 100 / v),
        ("m ^ 0.5", lambda v: np.sqrt(v)),
    ],
)
def test_operators_precedence_and_scalars(cw, expression: str, compute) -> None:
    start = minute_start(30)
    values = {i: float(i + 1) for i in range(10)}
    put_minutes(cw, "loss", start, values)
    result = one(fetch(cw, [stat("m"), expr("e", expression)], start, start + 600), "e")
    assert points(result) == pytest.approx({t: float(compute(v)) for t, v in by_minute(start, values).items()})


def test_scalar_functions_of_one_series(cw) -> None:
    start = minute_start(30)
    values = {i: float(v) for i, v in enumerate([4, 8, 15, 16, 23, 42])}
    put_minutes(cw, "loss", start, values)
    array = np.array(list(values.values()))
    queries = [stat("m"), expr("centred", "m - AVG(m)"), expr("share", "m / SUM(m)"),
               expr("span", "(m - MIN(m)) / (MAX(m) - MIN(m))"), expr("mean", "AVG(m)", ReturnData=False),
               expr("uses_mean", "m * 0 + mean")]
    results = fetch(cw, queries, start, start + 600)
    times = list(by_minute(start, values))
    assert points(one(results, "centred")) == pytest.approx(dict(zip(times, array - array.mean(), strict=True)))
    assert points(one(results, "share")) == pytest.approx(dict(zip(times, array / array.sum(), strict=True)))
    span = (array - array.min()) / (array.max() - array.min())
    assert points(one(results, "span")) == pytest.approx(dict(zip(times, span, strict=True)))
    assert one(results, "uses_mean")["Values"] == pytest.approx([array.mean()] * len(values))
    assert "mean" not in [r["Id"] for r in results]
    with pytest.raises(InvalidParameterValue, match="Error in expression e: its result is a number"):
        fetch(cw, [stat("m"), expr("e", "MAX(m)")], start, start + 600)


# -- arrays: METRICS(), SUM, AVG, MIN, MAX --------------------------------------------------


def put_three(cw, start: int) -> dict[str, dict[int, float]]:
    rng = np.random.default_rng(3)
    data = {name: {i: float(rng.integers(-20, 20)) for i in range(30) if rng.random() < 0.7}
            for name in ("loss_a", "loss_b", "acc_c")}
    for name, values in data.items():
        put_minutes(cw, name, start, values)
    return data


def test_functions_over_an_array_work_per_timestamp_over_the_series_present(cw) -> None:
    start = minute_start(60)
    data = put_three(cw, start)
    queries = [stat(name, name, ReturnData=False) for name in data] + [
        expr("total", "SUM(METRICS())"), expr("mean", "AVG([loss_a, loss_b, acc_c])"),
        expr("low", "MIN(METRICS())"), expr("high", "MAX([METRICS(\"loss\"), acc_c])"),
        expr("losses", 'SUM(METRICS("loss"))'),
    ]
    results = fetch(cw, queries, start, start + 1800)
    assert [r["Id"] for r in results] == ["total", "mean", "low", "high", "losses"]
    minutes = sorted(set().union(*data.values()))
    matrix = np.array([[data[name].get(i, np.nan) for name in data] for i in minutes])
    times = [float(start + 60 * i) for i in minutes]
    for query_id, reduce in (("total", np.nansum), ("mean", np.nanmean), ("low", np.nanmin), ("high", np.nanmax)):
        assert points(one(results, query_id)) == pytest.approx(dict(zip(times, reduce(matrix, axis=1), strict=True)))
    losses = sorted(set(data["loss_a"]) | set(data["loss_b"]))
    expected = {float(start + 60 * i): data["loss_a"].get(i, 0) + data["loss_b"].get(i, 0) for i in losses}
    assert points(one(results, "losses")) == pytest.approx(expected)  # METRICS("loss"): the Ids holding "loss"


def test_an_array_result_gives_one_result_per_series_with_the_same_id(cw) -> None:
    start = minute_start(60)
    data = put_three(cw, start)
    queries = [stat("loss_a", "loss_a"), stat("loss_b", "loss_b", Label="B"), stat("acc_c", "acc_c", ReturnData=False),
               expr("pct", "METRICS() / 100"), expr("named", "METRICS('loss') * 2", Label="twice"),
               expr("placed", "METRICS('acc')", Label="[${LABEL}] max ${MAX}")]
    results = fetch(cw, queries, start, start + 1800)
    assert [(r["Id"], r["Label"]) for r in results] == [
        ("loss_a", "loss_a"), ("loss_b", "B"), ("pct", "loss_a"), ("pct", "B"), ("pct", "acc_c"),
        ("named", "twice loss_a"), ("named", "twice B"), ("placed", f"[acc_c] max {max(data['acc_c'].values()):g}"),
    ]
    for result, name in zip([r for r in results if r["Id"] == "pct"], data, strict=True):
        assert points(result) == pytest.approx({t: v / 100 for t, v in by_minute(start, data[name]).items()})


# -- RATE, DIFF, FILL --------------------------------------------------------------------------


def test_rate_and_diff_between_consecutive_points(cw) -> None:
    rng = np.random.default_rng(11)
    start = int(datetime.now(UTC).timestamp()) - 900
    times = np.sort(rng.choice(np.arange(600), size=80, replace=False)) + start
    values = rng.normal(100, 30, size=80).round(2)
    put(cw, "loss", dict(zip(times.tolist(), values.tolist(), strict=True)), resolution=1)
    put(cw, "other", {float(t): 1.0 for t in times[:5]}, resolution=1)
    queries = [stat("m", period=1), stat("o", "other", period=1, ReturnData=False), expr("rate", "RATE(m)"),
               expr("diff", "DIFF(m)"), expr("both", "DIFF(METRICS())")]
    results = fetch(cw, queries, start, start + 600, ScanBy="TimestampAscending")
    later = [float(t) for t in times[1:]]
    assert points(one(results, "rate")) == pytest.approx(dict(zip(later, np.diff(values) / np.diff(times), strict=True)))
    assert points(one(results, "diff")) == pytest.approx(dict(zip(later, np.diff(values), strict=True)))
    first, second = [r for r in results if r["Id"] == "both"]
    assert points(first) == points(one(results, "diff"))
    assert points(second) == {float(t): 0.0 for t in times[1:5]}


def test_fill_with_a_value_repeat_linear_and_a_series(cw) -> None:
    start = minute_start(60)
    values = {3: 5.0, 4: 7.0, 8: 3.0, 12: 9.0}
    other = {0: 100.0, 5: 100.0, 6: 100.0, 15: 100.0}
    put_minutes(cw, "loss", start, values)
    put_minutes(cw, "other", start, other)
    queries = [stat("m"), stat("o", "other", ReturnData=False), stat("nothing", "never_put", ReturnData=False),
               expr("zero", "FILL(m, 0)"), expr("repeat", "FILL(m, REPEAT)"), expr("linear", "FILL(m, LINEAR)"),
               expr("from_o", "FILL(m, o)"), expr("empty", "FILL(nothing, -1)"), expr("each", "FILL(METRICS(), 1)")]
    results = fetch(cw, queries, start, start + 20 * 60)
    minutes = range(20)
    assert points(one(results, "zero")) == by_minute(start, {i: values.get(i, 0.0) for i in minutes})
    repeat, last = {}, None
    for i in minutes:
        last = values.get(i, last)
        if last is not None:
            repeat[i] = last
    assert points(one(results, "repeat")) == by_minute(start, repeat)
    known = sorted(values)
    interpolated = np.interp(range(3, 13), known, [values[i] for i in known])
    assert points(one(results, "linear")) == pytest.approx(by_minute(start, dict(zip(range(3, 13), interpolated,
                                                                                    strict=True))))
    assert points(one(results, "from_o")) == by_minute(start, {**other, **values})
    assert points(one(results, "empty")) == by_minute(start, {i: -1.0 for i in minutes})  # the usual FILL(m, 0) idiom
    filled = [points(r) for r in results if r["Id"] == "each"]
    assert filled == [by_minute(start, {i: {**dict.fromkeys(minutes, 1.0), **data}[i] for i in minutes})
                      for data in (values, other, {})]


def test_an_expressions_period_is_that_of_a_series_without_one(cw) -> None:
    start = minute_start(60)
    put_minutes(cw, "loss", start, {0: 1.0})
    queries = [stat("m"), expr("with_period", 'FILL(SUM(METRICS("nothing")), 0)', Period=120),
               expr("without", 'FILL(SUM(METRICS("nothing")), 0)'), expr("own", "FILL(m, 0)", Period=300)]
    results = fetch(cw, queries, start, start + 600)
    assert points(one(results, "with_period")) == {float(start + 120 * i): 0.0 for i in range(5)}
    assert points(one(results, "without")) == {}
    assert points(one(results, "own")) == by_minute(start, {0: 1.0, **{i: 0.0 for i in range(1, 10)}})


def test_expressions_use_expressions_and_only_returned_queries_come_back(cw) -> None:
    start = minute_start(30)
    put_minutes(cw, "loss", start, {i: float(i) for i in range(5)})
    queries = [stat("m", ReturnData=False), expr("doubled", "m * 2", ReturnData=False), expr("e3", "tripled - m"),
               expr("tripled", "doubled + m")]
    results = fetch(cw, queries, start, start + 300)
    assert [r["Id"] for r in results] == ["e3", "tripled"]
    assert points(one(results, "e3")) == by_minute(start, {i: 2.0 * i for i in range(5)})


# -- labels ------------------------------------------------------------------------------------


def test_default_explicit_and_dynamic_labels(cw) -> None:
    start = minute_start(30)
    put_minutes(cw, "loss", start, {0: 2.0, 1: 6.0, 2: 4.0})
    queries = [
        stat("m"), stat("named", Label="Training loss"), expr("e", "m * 2"), expr("labelled", "m * 2", Label="x2"),
        stat("props", Label="${PROP('Namespace')}/${PROP('MetricName')} ${PROP('Dim.Run')} ${PROP('Stat')} "
                            "${PROP('Period')} [${LABEL}]"),
        stat("stats", Label="${MIN} ${MAX} ${AVG} ${SUM} ${FIRST} ${LAST} ${DATAPOINT_COUNT} ${MIN_MAX_RANGE} "
                            "${FIRST_LAST_RANGE}"),
        expr("kept", "m", Label="${FIRST_TIME} ${PROP('Dim.Nope')} ${LABEL}"),
    ]
    labels = [r["Label"] for r in fetch(cw, queries, start, start + 300, ScanBy="TimestampAscending",
                                        LabelOptions={"Timezone": "+0130"})]
    assert labels == ["loss", "Training loss", "e", "x2", "Math/loss r1 Average 60 [loss]", "2 6 4 12 2 4 3 4 2",
                      "${FIRST_TIME} ${PROP('Dim.Nope')} kept"]


# -- pagination --------------------------------------------------------------------------------


def all_pages(cw, **request: Any) -> list[dict[str, Any]]:
    pages = [cw.get_metric_data(**request)]
    while "NextToken" in pages[-1]:
        pages.append(cw.get_metric_data(**request, NextToken=pages[-1]["NextToken"]))
    return pages


@pytest.mark.parametrize("scan_by", ["TimestampDescending", "TimestampAscending"])
@pytest.mark.parametrize("limit", [1, 7, 13, 119, 120, 1000])
def test_pages_hold_max_datapoints_in_timestamp_order_and_add_up(cw, scan_by: str, limit: int) -> None:
    start = minute_start(60)
    put_minutes(cw, "a", start, {i: float(i) for i in range(30)})
    put_minutes(cw, "b", start, {i: float(-i) for i in range(0, 40, 2)})
    request = {"MetricDataQueries": [stat("ma", "a"), stat("mb", "b"), expr("e", "ma + mb"), expr("all", "METRICS()")],
               "StartTime": start, "EndTime": start + 3600, "ScanBy": scan_by}
    whole = cw.get_metric_data(**request)["MetricDataResults"]
    total = sum(len(r["Values"]) for r in whole)
    assert total == 30 + 20 + 15 + 30 + 20  # ma + mb has the 15 minutes both have
    pages = all_pages(cw, **request, MaxDatapoints=limit)
    assert len(pages) == -(-total // limit)
    descending = scan_by == "TimestampDescending"
    previous: list[tuple[float, int]] = []
    for number, page in enumerate(pages):
        results = page["MetricDataResults"]
        assert [(r["Id"], r["Label"]) for r in results] == [(r["Id"], r["Label"]) for r in whole]
        assert sum(len(r["Values"]) for r in results) == (limit if number < len(pages) - 1 else total - limit * number)
        keys = sorted((-t.timestamp() if descending else t.timestamp(), index)
                      for index, r in enumerate(results) for t in r["Timestamps"])
        assert not previous or previous[-1] < keys[0]  # newest (or oldest) first across all results
        previous = keys
        for index, result in enumerate(results):
            assert result["Timestamps"] == sorted(result["Timestamps"], reverse=descending)
            later = any(p["MetricDataResults"][index]["Values"] for p in pages[number + 1:])
            assert result["StatusCode"] == ("PartialData" if later else "Complete")
    for index, result in enumerate(whole):
        assert [v for p in pages for v in p["MetricDataResults"][index]["Values"]] == result["Values"]
        assert [t for p in pages for t in p["MetricDataResults"][index]["Timestamps"]] == result["Timestamps"]


def test_a_next_token_is_only_good_for_its_request(cw) -> None:
    start = minute_start(30)
    put_minutes(cw, "loss", start, {i: float(i) for i in range(10)})
    request = {"MetricDataQueries": [stat("m")], "StartTime": start, "EndTime": start + 600, "MaxDatapoints": 3}
    token = cw.get_metric_data(**request)["NextToken"]
    for other in ({**request, "EndTime": start + 540}, {**request, "MetricDataQueries": [stat("n")]},
                  {**request, "ScanBy": "TimestampAscending"}):
        with pytest.raises(TrainmonError) as info:
            cw.get_metric_data(**other, NextToken=token)
        assert info.value.response["Error"] == {"Code": "InvalidNextToken", "Message": "The next token specified is invalid."}
    for bad in ("", "not-a-token", token[:-4], "e30="):
        with pytest.raises(TrainmonError, match="InvalidNextToken"):
            cw.get_metric_data(**request, NextToken=bad)
    assert len(cw.get_metric_data(**request, NextToken=token)["MetricDataResults"][0]["Values"]) == 3


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "column", "found"),
    [
        ("m1 +", 5, "end of expression"),
        ("m1 + * 2", 6, "'*'"),
        ("m1 # 2", 4, "'#'"),
        ("(m1 + 1", 8, "end of expression"),
        ("SUM(m1,", 8, "end of expression"),
        ("[m1 m1]", 5, "'m1'"),
        ("m1 + 2)", 7, "')'"),
        ("FILL(m1,, 0)", 9, "','"),
        ("m1 * 'x", 6, "\"'\""),
        ("   ", 4, "end of expression"),
    ],
)
def test_a_malformed_expression_names_the_column(cw, expression: str, column: int, found: str) -> None:
    start = minute_start(10)
    with pytest.raises(InvalidParameterValue) as info:
        cw.get_metric_data(MetricDataQueries=[stat("m1"), expr("e1", expression)], StartTime=start, EndTime=start + 60)
    assert info.value.message.startswith(
        f"Syntax error in MetricDataQueries.member.2.Expression at column {column}: unexpected {found}; expected "
    )
    assert info.value.response["Error"]["Code"] == "InvalidParameterValue"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("m1 + m3", "Error in expression e1 at column 6: unknown Id 'm3'."),
        ("FOO(m1)", "Error in expression e1 at column 1: unknown function FOO; the functions are AVG, DIFF, FILL, "
                    "MAX, METRICS, MIN, RATE, SUM."),
        ("m1 + FILL(m1)", "Error in expression e1 at column 6: FILL takes 2 arguments, not 1."),
        ("SUM(m1, m1)", "Error in expression e1 at column 1: SUM takes 1 argument, not 2."),
        ("SUM(2)", "Error in expression e1 at column 1: SUM takes a time series or an array of time series, not a number."),
        ("RATE(1) + m1", "Error in expression e1 at column 1: RATE takes a time series"),
        ("METRICS(m1)", "Error in expression e1 at column 1: METRICS takes no argument or a string"),
        ("METRICS('a', 'b')", "Error in expression e1 at column 1: METRICS takes 0 or 1 arguments, not 2."),
        ("m1 + REPEAT", "Error in expression e1 at column 6: REPEAT is valid only as the second argument of FILL()."),
        ("m1 + SUM", "Error in expression e1 at column 6: unknown name SUM: Ids start with a lowercase letter, and "
                     "function names are followed by '('."),
        ("M1 + 1", "Error in expression e1 at column 1: unknown name M1"),
        ("m1 + 'x'", "Error in expression e1 at column 6: a string is valid only as the argument of METRICS()."),
        ("METRICS() + METRICS()", "Error in expression e1 at column 11: '+' between two arrays of time series"),
        ("SUM([m1, 2])", "Error in expression e1 at column 5: an array holds time series, not numbers."),
        ("FILL(2, 0)", "Error in expression e1 at column 1: FILL takes a time series or an array of time series first"),
        ("FILL(m1, METRICS())", "Error in expression e1 at column 1: FILL fills with a number, a time series, REPEAT"),
    ],
)
def test_expression_errors_name_the_query_and_column(cw, expression: str, message: str) -> None:
    start = minute_start(10)
    with pytest.raises(InvalidParameterValue) as info:
        cw.get_metric_data(MetricDataQueries=[stat("m1"), expr("e1", expression)], StartTime=start, EndTime=start + 60)
    assert info.value.message.startswith(message)


@pytest.mark.parametrize(
    "expressions",
    [
        {"e1": "e2 + 1", "e2": "e3 * 2", "e3": "e1"},
        {"e1": "e1 + m1"},
        {"e1": "m1", "a": "b", "b": "SUM([a, m1])"},
    ],
)
def test_circular_references_are_refused_with_the_cycle(cw, expressions: dict[str, str]) -> None:
    start = minute_start(10)
    queries = [stat("m1")] + [expr(i, e) for i, e in expressions.items()]
    with pytest.raises(InvalidParameterValue) as info:
        cw.get_metric_data(MetricDataQueries=queries, StartTime=start, EndTime=start + 60)
    found = re.fullmatch(r"Circular reference in MetricDataQueries: ([\w -> ]+)\. An expression cannot use its own "
                         r"result, directly or through other expressions\.", info.value.message)
    assert found, info.value.message
    cycle = found.group(1).split(" -> ")
    assert cycle[0] == cycle[-1] and len(cycle) >= 2
    for user, used in zip(cycle, cycle[1:], strict=False):
        assert re.search(rf"\b{used}\b", expressions[user])  # each Id uses the next one


def test_limits_on_the_number_of_queries_and_the_expression(cw) -> None:
    start = minute_start(10)
    window = {"StartTime": start, "EndTime": start + 60}
    with pytest.raises(InvalidParameterValue) as info:
        cw.get_metric_data(MetricDataQueries=[stat(f"m{i}") for i in range(501)], **window)
    assert info.value.message == "The collection MetricDataQueries must not have a size greater than 500."
    assert len(cw.get_metric_data(MetricDataQueries=[stat(f"m{i}") for i in range(500)], **window)[
        "MetricDataResults"]) == 500
    long = "m0" + " + m0" * 409  # 2,047 characters
    assert len(cw.get_metric_data(MetricDataQueries=[stat("m0"), expr("e", long + " ")], **window)[
        "MetricDataResults"]) == 2
    with pytest.raises(InvalidParameterValue, match="1 to 2048 characters"):
        cw.get_metric_data(MetricDataQueries=[stat("m0"), expr("e", long + "  ")], **window)
    deep = "-" * 2000 + "m0"  # nesting as deep as 2,048 characters allow
    assert cw.get_metric_data(MetricDataQueries=[stat("m0"), expr("e", deep)], **window)["MetricDataResults"]


@pytest.mark.parametrize(
    ("queries", "error", "message"),
    [
        ([], InvalidParameterValue, "The collection MetricDataQueries must have 1 to 500 members."),
        ([{"MetricStat": stat("x")["MetricStat"]}], MissingParameter,
         "The parameter MetricDataQueries.member.1.Id is required."),
        *[([stat(bad)], InvalidParameterValue, f"The value {bad} for parameter MetricDataQueries.member.1.Id is not valid")
          for bad in ("1m", "Loss", "a-b", "", "a" * 256, "m 1")],
        ([stat("m"), stat("m")], InvalidParameterValue,
         "The value m for parameter MetricDataQueries.member.2.Id is a duplicate"),
        ([{**stat("m"), "Expression": "1"}], InvalidParameterCombination,
         "The parameters MetricDataQueries.member.1.MetricStat and MetricDataQueries.member.1.Expression are "
         "mutually exclusive"),
        ([{"Id": "m"}], MissingParameter, "The parameter MetricDataQueries.member.1 needs one of MetricStat or Expression."),
        ([stat("m", statistic="Median")], InvalidParameterValue,
         "The value Median for parameter MetricDataQueries.member.1.MetricStat.Stat is not a valid statistic"),
        ([stat("m", statistic="p101")], InvalidParameterValue, "is not a valid statistic"),
        ([stat("m", period=61)], InvalidParameterValue,
         "The parameter MetricDataQueries.member.1.MetricStat.Period must be a multiple of 60."),
        ([expr("e", "m", Period=0)], InvalidParameterValue,
         "The parameter MetricDataQueries.member.1.Period must be a positive integer"),
        ([{"Id": "m", "MetricStat": {"Period": 60, "Stat": "Sum"}}], MissingParameter,
         "The parameter MetricDataQueries.member.1.MetricStat.Metric is required."),
        ([{"Id": "m", "MetricStat": {**stat("m")["MetricStat"], "Metric": {"MetricName": "x"}}}], MissingParameter,
         "The parameter MetricDataQueries.member.1.MetricStat.Metric.Namespace is required."),
        ([stat("m", ReturnData="yes")], InvalidParameterValue, "ReturnData must be true or false"),
        ([stat("m", Colour="red")], InvalidParameterValue, "Unknown parameter(s) in MetricDataQueries.member.1: Colour."),
        ([expr("e", 12)], InvalidParameterValue, "Expression must be a string of 1 to 2048 characters"),
    ],
)
def test_query_validation(cw, queries, error, message: str) -> None:
    start = minute_start(10)
    with pytest.raises(error) as info:
        cw.get_metric_data(MetricDataQueries=queries, StartTime=start, EndTime=start + 60)
    assert message in info.value.message


@pytest.mark.parametrize(
    ("request_", "error", "message"),
    [
        ({"StartTime": None}, MissingParameter, "The parameter StartTime is required."),
        ({"EndTime": None}, MissingParameter, "The parameter EndTime is required."),
        ({"MetricDataQueries": None}, MissingParameter, "The parameter MetricDataQueries is required."),
        ({"EndTime": 0}, InvalidParameterValue, "The parameter StartTime must be before EndTime."),
        ({"ScanBy": "Newest"}, InvalidParameterValue, "ScanBy is not one of TimestampDescending, TimestampAscending"),
        ({"MaxDatapoints": 0}, InvalidParameterValue, "MaxDatapoints must be a positive integer"),
        ({"LabelOptions": {"Timezone": "CET"}}, InvalidParameterValue, "LabelOptions.Timezone is not valid"),
        ({"Colour": "red"}, InvalidParameterValue, "Unknown parameter(s): Colour."),
    ],
)
def test_request_validation(cw, request_: dict[str, Any], error, message: str) -> None:
    start = minute_start(10)
    with pytest.raises(error) as info:
        cw.get_metric_data(**{"MetricDataQueries": [stat("m")], "StartTime": start, "EndTime": start + 60, **request_})
    assert message in info.value.message


# -- boto3's shapes ----------------------------------------------------------------------------


def conforms(value: Any, shape: Any, where: str = "response") -> None:
    """``value`` fits the botocore output shape: known members only, with the right types."""
    kind = shape.type_name
    if kind == "structure":
        assert isinstance(value, dict) and set(value) <= set(shape.members), f"{where}: {sorted(value)}"
        for name, item in value.items():
            conforms(item, shape.members[name], f"{where}.{name}")
    elif kind == "list":
        assert isinstance(value, list), where
        for index, item in enumerate(value):
            conforms(item, shape.member, f"{where}[{index}]")
    elif kind == "timestamp":
        assert isinstance(value, datetime) and value.tzinfo is not None, where
    else:
        expected = {"string": str, "double": float, "integer": int, "boolean": bool}[kind]
        assert isinstance(value, expected), f"{where}: {value!r} is not a {kind}"
        if kind == "string" and shape.enum:
            assert value in shape.enum, where


def test_request_and_response_have_boto3s_shapes(cw) -> None:
    session = pytest.importorskip("botocore.session")
    from botocore.validate import validate_parameters

    operation = session.get_session().get_service_model("cloudwatch").operation_model("GetMetricData")
    start = minute_start(30)
    put_minutes(cw, "loss", start, {i: float(i) for i in range(10)})
    request = {"MetricDataQueries": [stat("m", statistic="p90"), expr("e", "METRICS() * 2", Label="x", Period=60)],
               "StartTime": datetime.fromtimestamp(start, UTC), "EndTime": datetime.fromtimestamp(start + 600, UTC),
               "ScanBy": "TimestampAscending", "MaxDatapoints": 15, "LabelOptions": {"Timezone": "+0000"}}
    validate_parameters(request, operation.input_shape)
    first = cw.get_metric_data(**request)
    second = cw.get_metric_data(**request, NextToken=first["NextToken"])
    for response in (first, second):
        conforms(response, operation.output_shape)
    assert [r["StatusCode"] for r in first["MetricDataResults"]] == ["PartialData", "PartialData"]
    assert [r["StatusCode"] for r in second["MetricDataResults"]] == ["Complete", "Complete"]
