"""``trainmon put-metric-data`` and ``trainmon maintain``, run as a user runs them."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from trainmon.sdk.clients import CloudWatchClient
from trainmon.store import open_store

from .conftest import run_cli


def _statistics(home: Path, name: str, dimensions: list[dict[str, str]], start: float) -> list[dict]:
    store = open_store(home)
    try:
        return CloudWatchClient(store).get_metric_statistics(
            Namespace="Team", MetricName=name, Dimensions=dimensions, StartTime=start - 60, EndTime=time.time() + 60,
            Period=60, Statistics=["SampleCount", "Sum", "Minimum", "Maximum"])["Datapoints"]
    finally:
        store.close()


def test_put_metric_data_from_options_and_from_json(home: Path, tmp_path: Path) -> None:
    now = time.time()
    run_cli("put-metric-data", "--namespace", "Team", "--metric-name", "Throughput", "--value", "12.5",
            "--unit", "Count/Second", "--dimensions", "Host=box-1,Rack=r7", "--timestamp", str(now), check=True)
    [point] = _statistics(home, "Throughput", [{"Name": "Host", "Value": "box-1"}, {"Name": "Rack", "Value": "r7"}], now)
    assert (point["SampleCount"], point["Sum"], point["Unit"]) == (1.0, 12.5, "Count/Second")
    data = tmp_path / "data.json"
    data.write_text(json.dumps([{"MetricName": "Loss", "Values": [1.0, 3.0], "Counts": [2, 1], "Timestamp": now},
                                {"MetricName": "Loss", "StatisticValues": {"SampleCount": 2, "Sum": 10, "Minimum": 4,
                                                                           "Maximum": 6}, "Timestamp": now}]))
    run_cli("put-metric-data", "--namespace", "Team", "--metric-data", f"file://{data}", check=True)
    run_cli("put-metric-data", "--namespace", "Team", "--metric-name", "Loss", "--timestamp", str(now),
            "--statistic-values", "SampleCount=1,Sum=0.5,Minimum=0.5,Maximum=0.5", check=True)
    [point] = _statistics(home, "Loss", [], now)
    assert (point["SampleCount"], point["Sum"], point["Minimum"], point["Maximum"]) == (6.0, 15.5, 0.5, 6.0)


def test_a_timestamp_without_a_zone_is_utc_as_in_the_api(home: Path) -> None:
    stamp = datetime.now(UTC).replace(microsecond=0, tzinfo=None) - timedelta(minutes=5)
    run_cli("put-metric-data", "--namespace", "Team", "--metric-name", "Zoned", "--value", "1",
            "--timestamp", stamp.isoformat(), check=True, env={"TZ": "America/New_York"})
    # read as New York's time it would be five hours ahead, and refused (at most two hours ahead)
    [point] = _statistics(home, "Zoned", [], stamp.replace(tzinfo=UTC).timestamp())
    assert point["SampleCount"] == 1.0


def test_put_metric_data_refuses_bad_input_with_cloudwatchs_words(home: Path) -> None:
    cases = [
        (["--metric-name", "X", "--value", "nan"], "InvalidParameterValue"),
        (["--metric-name", "X", "--value", "1", "--dimensions", "Host"], "--dimensions 'Host' must look like KEY=VALUE"),
        (["--metric-data", "[{"], "--metric-data is not JSON"),
        (["--metric-name", "X", "--value", "1", "--metric-data", "[]"], "either --metric-data or --metric-name"),
        (["--value", "1"], "give --metric-name NAME"),
        (["--metric-name", "X", "--statistic-values", "Sum=a"], "takes numbers"),
    ]
    for arguments, words in cases:
        result = run_cli("put-metric-data", "--namespace", "Team", *arguments)
        assert result.returncode == 2 and words in result.stderr, (arguments, result.stderr)
    store = open_store(home)
    assert store.metric_keys() == []  # nothing written by a refused call
    store.close()


def test_maintain_seals_rolls_up_and_reports(home: Path) -> None:
    old = int(time.time()) - 3 * 3600
    data = [{"MetricName": "Latency", "Value": float(i % 7), "Timestamp": old + i, "StorageResolution": 1}
            for i in range(1000)]
    run_cli("put-metric-data", "--namespace", "Team", "--metric-data", json.dumps(data), check=True)
    result = run_cli("maintain", "--json", check=True)
    summary = json.loads(result.stdout)
    assert summary["ran"] and summary["sealed_points"] == 1000
    assert summary["rolled_series"] == 0  # the write rolled its datapoints up
    assert summary["Retention"] == "raw=3h,1m=15d,5m=63d,1h=455d"
    again = run_cli("maintain", check=True, env={"TRAINMON_RETENTION": "forever"})
    assert "retention raw=forever,1m=forever,5m=forever,1h=forever" in again.stdout
    assert "sealed 0 points" in again.stdout and "tiers" not in again.stdout  # the same tiers, kept longer
    changed = run_cli("maintain", check=True, env={"TRAINMON_RETENTION": "raw=3h,2m=15d,10m=63d"})
    assert "the store's roll-up tiers changed from 1m, 5m, 1h to this policy's: rebuilt for 1 metrics (" \
        in changed.stdout
    assert "(0 roll-up rows)" in changed.stdout  # nothing left to roll up: the rows written were the rebuild's
    store = open_store(home)
    try:  # the 10-minute tier holds the datapoints written under the other policy
        key = store.metric_keys()[0][0]
        rolled = store.metric_data(key, old // 600 * 600_000, (old // 600 + 3) * 600_000, 600, sketches=False)[0]
        assert rolled is not None and rolled["None"].count.sum() == 1000
    finally:
        store.close()
    bad = run_cli("maintain", env={"TRAINMON_RETENTION": "raw=3h,90s=1d"})
    assert bad.returncode == 2 and "multiple of 60" in bad.stderr
    assert "a tier of 90s is not a whole number of minutes" in bad.stderr
