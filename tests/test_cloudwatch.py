"""CloudWatch's metric API over the store, checked against numpy on random data."""

from __future__ import annotations

import math
import random
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

import trainmon
from trainmon.cloudwatch.sketch import RELATIVE_ACCURACY
from trainmon.errors import InvalidParameterCombination, InvalidParameterValue, MissingParameter

from .conftest import PY, run_cli

DIMS = [{"Name": "Run", "Value": "r1"}]


@pytest.fixture
def cw(home):
    return trainmon.client("cloudwatch")


def put_values(cw, values, start_s, step_s=1.0, name="loss", dims=DIMS, resolution=1):
    for offset in range(0, len(values), 1000):
        cw.put_metric_data(Namespace="Test", MetricData=[
            {"MetricName": name, "Dimensions": dims, "Value": v, "Timestamp": start_s + (offset + i) * step_s,
             "StorageResolution": resolution}
            for i, v in enumerate(values[offset:offset + 1000])
        ])


def stats(cw, start_s, end_s, period, **kwargs):
    return cw.get_metric_statistics(Namespace="Test", MetricName="loss", Dimensions=DIMS, StartTime=start_s,
                                     EndTime=end_s, Period=period, **kwargs)["Datapoints"]


@pytest.mark.parametrize("seed", range(4))
def test_statistics_match_numpy_on_random_data(cw, seed: int) -> None:
    """Whole minutes come from the roll-ups the writes keep: the five statistics as numpy computes
    them, percentiles within 1% of the value of rank floor(q * (n - 1)) (cloudwatch/sketch.py);
    shorter periods from the datapoints, percentiles interpolated as numpy does."""
    rng = random.Random(seed)
    start = int(time.time() // 60 * 60) - 1800
    values = [rng.uniform(0, 100) if rng.random() > 0.1 else rng.choice([0.0, 1e-9, 1e9]) for _ in range(900)]
    put_values(cw, values, start, step_s=1.7)
    for period in (rng.choice([60, 120, 300]), 30):
        points = stats(cw, start, start + 1800, period, Statistics=["SampleCount", "Average", "Sum", "Minimum",
                                                                      "Maximum"])
        percentiles = {p["Timestamp"]: p for p in stats(cw, start, start + 1800, period,
                                                        ExtendedStatistics=["p0.0", "p50", "p99.9", "p100"])}
        times = np.array([start + i * 1.7 for i in range(len(values))])
        array = np.array(values)
        expected_periods = sorted({int((t - start) // period) for t in times[times < start + 1800]})
        assert len(points) == len(expected_periods)
        for point, index in zip(points, expected_periods, strict=True):
            chosen = array[(times >= start + index * period) & (times < start + (index + 1) * period)]
            assert point["Timestamp"] == datetime.fromtimestamp(start + index * period, tz=UTC)
            assert point["SampleCount"] == len(chosen)
            assert point["Sum"] == pytest.approx(chosen.sum())
            assert point["Average"] == pytest.approx(chosen.mean())
            assert point["Minimum"] == chosen.min() and point["Maximum"] == chosen.max()
            extended = percentiles[point["Timestamp"]]["ExtendedStatistics"]
            for name, q in (("p0.0", 0), ("p50", 50), ("p99.9", 99.9), ("p100", 100)):
                if period < 60:
                    assert extended[name] == pytest.approx(np.percentile(chosen, q))
                else:
                    true = np.sort(chosen)[math.floor(q / 100.0 * (len(chosen) - 1))]
                    assert abs(extended[name] - true) <= RELATIVE_ACCURACY * true


def test_empty_periods_single_points_and_end_exclusive(cw) -> None:
    start = int(time.time() // 60 * 60) - 600
    put_values(cw, [5.0], start + 61)
    put_values(cw, [7.0], start + 180)
    points = stats(cw, start, start + 180, 60, Statistics=["SampleCount", "Average"])
    assert [(p["Timestamp"].timestamp() - start, p["SampleCount"], p["Average"]) for p in points] == [(60, 1.0, 5.0)]


def test_statistic_sets_mixed_with_values_and_percentiles_unavailable(cw) -> None:
    start = int(time.time() // 60 * 60) - 600
    cw.put_metric_data(Namespace="Test", MetricData=[
        {"MetricName": "loss", "Dimensions": DIMS, "Timestamp": start + 1, "StorageResolution": 1,
         "StatisticValues": {"SampleCount": 4, "Sum": 10, "Minimum": 1, "Maximum": 4}},
        {"MetricName": "loss", "Dimensions": DIMS, "Timestamp": start + 2, "StorageResolution": 1, "Value": 6},
        {"MetricName": "loss", "Dimensions": DIMS, "Timestamp": start + 3, "StorageResolution": 1,
         "Values": [1, 2], "Counts": [3, 1]},
    ])
    (point,) = stats(cw, start, start + 60, 60, Statistics=["SampleCount", "Sum", "Average", "Minimum", "Maximum"])
    assert point["SampleCount"] == 9 and point["Sum"] == 10 + 6 + 3 + 2
    assert point["Average"] == pytest.approx(21 / 9) and point["Minimum"] == 1 and point["Maximum"] == 6
    (no_percentile,) = stats(cw, start, start + 60, 60, ExtendedStatistics=["p50"])
    assert "ExtendedStatistics" not in no_percentile  # a statistic set of several values


def test_negative_values_make_percentiles_unavailable(cw) -> None:
    start = int(time.time() // 60 * 60) - 600
    put_values(cw, [-1.0, 2.0, 3.0], start)
    (point,) = stats(cw, start, start + 60, 60, ExtendedStatistics=["p50"])
    assert "ExtendedStatistics" not in point


def test_high_resolution_periods_and_rounding(cw) -> None:
    start = int(time.time()) - 300
    put_values(cw, list(range(20)), start, step_s=1)
    points = stats(cw, start + 3, start + 20, 5, Statistics=["SampleCount"])
    first = points[0]["Timestamp"].timestamp()
    assert first == (start + 3) // 5 * 5  # rounded down to the 5-second division
    assert sum(p["SampleCount"] for p in points) == 20 - (first - start if first > start else 0)


def test_standard_resolution_is_kept_per_minute(cw) -> None:
    start = int(time.time() // 60 * 60) - 600
    put_values(cw, [1.0, 3.0], start + 5, step_s=20, resolution=60)
    points = stats(cw, start, start + 120, 1, Statistics=["SampleCount"])
    assert [(p["Timestamp"].timestamp() - start, p["SampleCount"]) for p in points] == [(0, 2.0)]


@pytest.mark.parametrize("period", [0, 2, 59, 61, 90])
def test_invalid_periods(cw, period: int) -> None:
    with pytest.raises(InvalidParameterValue, match="Period"):
        stats(cw, time.time() - 600, time.time(), period, Statistics=["Sum"])


def test_age_rules_return_no_data_rather_than_an_error(cw) -> None:
    now = time.time()
    put_values(cw, [1.0], now - 4 * 3600 + 5)
    assert stats(cw, now - 4 * 3600, now - 4 * 3600 + 600, 10, Statistics=["Sum"]) == []
    assert stats(cw, now - 4 * 3600, now - 4 * 3600 + 600, 60, Statistics=["Sum"]) != []
    assert stats(cw, now - 20 * 86400, now - 19 * 86400, 60, Statistics=["Sum"]) == []


def test_the_1440_datapoint_limit_has_cloudwatchs_message(cw) -> None:
    now = time.time() // 60 * 60
    with pytest.raises(InvalidParameterCombination) as info:
        stats(cw, now - 86400 - 60, now, 60, Statistics=["Sum"])
    assert info.value.message == (
        "You have requested up to 1441 datapoints, which exceeds the limit of 1440. "
        "You may reduce the datapoints requested by increasing Period, or decreasing the time range."
    )
    assert len(stats(cw, now - 86400 + 60, now, 60, Statistics=["Sum"])) == 0


def test_statistics_parameter_rules(cw) -> None:
    now = time.time()
    with pytest.raises(InvalidParameterCombination):
        stats(cw, now - 600, now, 60, Statistics=["Sum"], ExtendedStatistics=["p50"])
    with pytest.raises(MissingParameter):
        stats(cw, now - 600, now, 60)
    with pytest.raises(InvalidParameterValue, match="p0.0 to p100"):
        stats(cw, now - 600, now, 60, ExtendedStatistics=["p101"])
    with pytest.raises(InvalidParameterValue):
        stats(cw, now - 600, now, 60, Statistics=["Median"])


def test_unit_filter(cw) -> None:
    start = int(time.time() // 60 * 60) - 600
    cw.put_metric_data(Namespace="Test", MetricData=[
        {"MetricName": "loss", "Dimensions": DIMS, "Value": 1, "Unit": "Seconds", "Timestamp": start + 1},
        {"MetricName": "loss", "Dimensions": DIMS, "Value": 5, "Unit": "Count", "Timestamp": start + 2},
    ])
    (seconds,) = stats(cw, start, start + 60, 60, Statistics=["Sum"], Unit="Seconds")
    assert seconds["Sum"] == 1 and seconds["Unit"] == "Seconds"
    assert stats(cw, start, start + 60, 60, Statistics=["Sum"], Unit="Bytes") == []


@pytest.mark.parametrize(
    ("item", "error", "text"),
    [
        ({"MetricName": "m", "Value": float("nan")}, InvalidParameterValue, "NaN"),
        ({"MetricName": "m", "Value": 2.0**361}, InvalidParameterValue, "-2^360 to 2^360"),
        ({"MetricName": "m", "Value": 1, "StorageResolution": 5}, InvalidParameterValue,
         "The parameter MetricData.member.2.StorageResolution must be a value in the set [ 1, 60 ]."),
        ({"MetricName": "m", "Value": 1, "Timestamp": datetime.now(UTC) - timedelta(days=15)},
         InvalidParameterValue, "two weeks in the past"),
        ({"MetricName": "m", "Value": 1, "Timestamp": datetime.now(UTC) + timedelta(hours=3)},
         InvalidParameterValue, "two hours in the future"),
        ({"MetricName": "m", "Value": 1, "Values": [1]}, InvalidParameterCombination, "mutually exclusive"),
        ({"MetricName": "m"}, MissingParameter, "needs one of Value"),
        ({"Value": 1}, MissingParameter, "MetricName is required"),
        ({"MetricName": "m", "Value": 1, "Dimensions": [{"Name": f"d{i}", "Value": "v"} for i in range(31)]},
         InvalidParameterValue, "not have more than 30"),
        ({"MetricName": "m", "Values": list(range(151))}, InvalidParameterValue, "150 unique values"),
        ({"MetricName": "m", "Values": [1, 2], "Counts": [1]}, InvalidParameterValue, "same length"),
        ({"MetricName": "m", "StatisticValues": {"SampleCount": 1, "Sum": 1, "Minimum": 1}}, MissingParameter,
         "StatisticValues.Maximum"),
        ({"MetricName": "m", "Value": 1, "Unit": "Parsecs"}, InvalidParameterValue, "not a valid unit"),
        ({"MetricName": "m", "Value": 1, "Dimensions": [{"Name": "a", "Value": "x\ty"}]}, InvalidParameterValue,
         "printable ASCII"),
    ],
)
def test_put_metric_data_validation_and_nothing_partial(cw, item, error, text) -> None:
    good = {"MetricName": "written", "Value": 1}
    with pytest.raises(error) as info:
        cw.put_metric_data(Namespace="Test", MetricData=[good, item])
    assert text in info.value.message
    assert cw.list_metrics(Namespace="Test")["Metrics"] == []  # the good item was not written either


def test_put_limits_on_the_call(cw) -> None:
    with pytest.raises(InvalidParameterValue, match="1 to 1000"):
        cw.put_metric_data(Namespace="Test", MetricData=[{"MetricName": "m", "Value": 1}] * 1001)
    with pytest.raises(InvalidParameterValue, match="'AWS/' is reserved"):
        cw.put_metric_data(Namespace="AWS/EC2", MetricData=[{"MetricName": "m", "Value": 1}])


def test_dimensions_identify_the_metric_exactly_and_list_filters(cw) -> None:
    cw.put_metric_data(Namespace="Test", MetricData=[
        {"MetricName": "loss", "Dimensions": [{"Name": "Run", "Value": "r1"}], "Value": 1},
        {"MetricName": "loss", "Dimensions": [{"Name": "Run", "Value": "r1"}, {"Name": "Host", "Value": "h"}], "Value": 9},
        {"MetricName": "acc", "Dimensions": [{"Name": "Run", "Value": "r2"}], "Value": 1},
    ])
    now = time.time()
    (point,) = cw.get_metric_statistics(Namespace="Test", MetricName="loss", Dimensions=[{"Name": "Run", "Value": "r1"}],
                                        StartTime=now - 600, EndTime=now + 60, Period=60, Statistics=["Maximum"])["Datapoints"]
    assert point["Maximum"] == 1
    by_name = cw.list_metrics(Namespace="Test", Dimensions=[{"Name": "Run"}])["Metrics"]
    assert len(by_name) == 3
    exact = cw.list_metrics(Namespace="Test", Dimensions=[{"Name": "Host", "Value": "h"}])["Metrics"]
    assert exact == [{"Namespace": "Test", "MetricName": "loss",
                      "Dimensions": [{"Name": "Host", "Value": "h"}, {"Name": "Run", "Value": "r1"}]}]
    assert len(cw.list_metrics(MetricName="acc", RecentlyActive="PT3H")["Metrics"]) == 1


def test_job_metrics_are_served_as_sagemaker_publishes_them(home, cw, script) -> None:
    train = script(
        """
        for loss in (0.5, 0.25, float("nan"), 0.125):
            print(f"loss={loss}")
        """
    )
    run_cli("run", "--name", "cw-job", "--metric", r"train:loss=loss=(\S+)", "--", PY, str(train), check=True)
    listed = cw.list_metrics(Namespace="/aws/sagemaker/TrainingJobs")["Metrics"]
    assert {"Namespace": "/aws/sagemaker/TrainingJobs", "MetricName": "train:loss",
            "Dimensions": [{"Name": "TrainingJobName", "Value": "cw-job"}]} in listed
    # the exact call the SageMaker SDK's TrainingJobAnalytics makes
    description = trainmon.client("sagemaker").describe_training_job(TrainingJobName="cw-job")
    result = cw.get_metric_statistics(
        Namespace="/aws/sagemaker/TrainingJobs", MetricName="train:loss",
        Dimensions=[{"Name": "TrainingJobName", "Value": "cw-job"}],
        StartTime=description["TrainingStartTime"], EndTime=description["TrainingEndTime"] + timedelta(minutes=1),
        Period=60, Statistics=["Average"])
    assert sum(1 for _ in result["Datapoints"]) >= 1
    assert sum(p["Average"] for p in result["Datapoints"]) / len(result["Datapoints"]) == pytest.approx(0.875 / 3)


def test_cli_metrics_statistics_go_through_the_cloudwatch_engine(home, script) -> None:
    import json

    train = script("for v in (1.0, 2.0, 3.0, 10.0):\n    print(f'loss={v}')\n")
    run_cli("run", "--name", "stats", "--metric", r"loss=loss=(\S+)", "--", PY, str(train), check=True)
    rows = json.loads(run_cli("metrics", "stats", "--statistic", "Average", "--statistic", "p50", "--statistic",
                              "SampleCount", "--period", "3600", "--json", check=True).stdout)
    assert len(rows) == 1 and rows[0]["MetricName"] == "loss"
    assert rows[0]["Average"] == 4.0 and rows[0]["p50"] == 2.5 and rows[0]["SampleCount"] == 4.0
    bad = run_cli("metrics", "stats", "--statistic", "Median")
    assert bad.returncode == 2 and "InvalidParameterValue" in bad.stderr and "parameter --statistic" in bad.stderr
    backwards = run_cli("metrics", "stats", "--statistic", "Average", "--start", "2026-01-02T00:00:00Z",
                        "--end", "2026-01-01T00:00:00Z")
    assert backwards.returncode == 2 and "--start must be before --end" in backwards.stderr
    odd = run_cli("metrics", "stats", "--statistic", "Average", "--period", "7")
    assert odd.returncode == 2 and "The parameter --period must be 1, 5, 10, 20, 30" in odd.stderr
    table = run_cli("metrics", "stats", "--statistic", "Maximum", check=True).stdout
    assert "Maximum" in table and "10" in table


def test_list_metrics_pages_cost_the_same_however_many_metrics_there_are(cw, monkeypatch) -> None:
    """100,000 metric names: every one listed once, in pages of 500, and no page reads more rows
    than a page and a read's worth, wherever it lies (a keyset, not an offset over every key)."""
    from trainmon.store.base import SqlStore

    total = 100_000
    for start in range(0, total, 1000):
        cw.put_metric_data(Namespace="Many", MetricData=[
            {"MetricName": f"metric-{n:06d}", "Value": 1.0} for n in range(start, start + 1000)])
    read: list[int] = []
    original = SqlStore.metric_keys_after

    def counted(self, *args, **kwargs):
        rows = original(self, *args, **kwargs)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(SqlStore, "metric_keys_after", counted)
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        read.clear()
        page = cw.list_metrics(Namespace="Many", **({"NextToken": token} if token else {}))
        pages += 1
        assert len(page["Metrics"]) <= 500 and sum(read) <= 1000, (pages, read)
        seen.extend(metric["MetricName"] for metric in page["Metrics"])
        token = page.get("NextToken")
        if token is None:
            break
    assert len(seen) == total and len(set(seen)) == total and pages in (total // 500, total // 500 + 1)
    with pytest.raises(InvalidParameterValue):
        cw.list_metrics(Namespace="Many", NextToken="junk")
    with pytest.raises(InvalidParameterValue):  # a token is bound to the request that gave it
        cw.list_metrics(Namespace="Other", NextToken=cw.list_metrics(Namespace="Many")["NextToken"])
