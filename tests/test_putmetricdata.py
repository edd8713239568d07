"""PutMetricData written behind the calls: a call validated whole as columns, queued, and written
with the calls around it (store.series.buffer), in every backend; and the maintainer a writing process
starts. What another process sees is read with the database's own driver, beside trainmon's
connections, which write what their process queued before they read."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmon.api.alarms import evaluate_alarms
from trainmon.clock import ManualClock
from trainmon.cloudwatch.datapoints import _plain, parse_datapoints
from trainmon.cloudwatch.model import MetricKey, parse_put
from trainmon.cloudwatch.retention import Retention, parse
from trainmon.errors import InvalidParameterValue, MissingParameter, StoreError, Throttling, TrainmonError
from trainmon.runtime.watch import maintenance
from trainmon.runtime.watch.maintenance import FIRST_AFTER_S, Maintainer
from trainmon.sdk.clients import CloudWatchClient
from trainmon.store import Store, WriteBehind, open_store
from trainmon.store.series.buffer import of_database

from .conftest import PostgresServer, StoreTarget, sqlite_locked

NOW_S = 1_700_000_000.0
DIMS = [{"Name": "Host", "Value": "algo-1"}]


# -- a call as columns: the same answers as parse_put ----------------------------------------------


class _Steps(int):
    """An int subclass, as a script's own counters are (an IntEnum's members too)."""

names = st.sampled_from(["loss", "acc", "", "x" * 256, 7, None, ["loss"]])
dimension = st.fixed_dictionaries({"Name": st.sampled_from(["Host", "Run", ":x", "tab\t", "", 3]),
                                   "Value": st.sampled_from(["algo-1", "r1", "", "é", None, ["v"]])})
stamps = st.one_of(st.floats(NOW_S - 20 * 86_400, NOW_S + 4 * 3600), st.integers(0, 2 * 10**9),
                   st.sampled_from([math.nan, math.inf, 10**400]),
                   st.floats(NOW_S - 20 * 86_400, NOW_S + 4 * 3600).map(np.float64),
                   st.integers(int(NOW_S) - 20 * 86_400, int(NOW_S) + 4 * 3600).map(np.int64),
                   st.floats(NOW_S - 20 * 86_400, NOW_S + 4 * 3600).map(lambda x: Decimal(repr(x))),
                   st.sampled_from([np.float64("nan"), Decimal("NaN"), Decimal("sNaN"), Decimal("1e400"),
                                    Fraction(int(NOW_S) * 3 - 1, 3), np.bool_(True), np.float32(NOW_S)]),
                   st.just(NOW_S - 0.0005), st.just(NOW_S + 0.0015), st.just(True), st.just("2023-11-14T22:13:20Z"),
                   st.datetimes(min_value=datetime(2023, 11, 1), max_value=datetime(2023, 11, 15)),
                   st.datetimes(min_value=datetime(2023, 11, 1), max_value=datetime(2023, 11, 15), timezones=st.just(UTC)))
numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**400, 10**400),
                    st.sampled_from([0, -0.0, 2.0**360, 2.0**361, True, "1", None]),
                    st.floats(allow_nan=True, allow_infinity=True).map(np.float64),
                    st.floats(width=32).map(np.float32), st.integers(-2**63, 2**63 - 1).map(np.int64),
                    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: Decimal(repr(x))),
                    st.fractions(max_denominator=1000), st.integers(-10**6, 10**6).map(_Steps),
                    st.sampled_from([np.bool_(False), Decimal("sNaN"), Decimal("-1e400"), Decimal("1e-400"),
                                     np.longdouble("1e400"), np.uint8(7), 1 + 0j]))


@st.composite
def item(draw: st.DrawFn) -> dict[str, Any]:
    """A MetricData item, often plain and valid, sometimes wrong in one or several ways."""
    found: dict[str, Any] = {"MetricName": draw(st.sampled_from(["loss", "acc"])) if draw(st.booleans())
                             else draw(names)}
    if draw(st.booleans()):
        found["Dimensions"] = draw(st.one_of(
            st.just([{"Name": "Host", "Value": "algo-1"}]), st.just([{"Name": "Host", "Value": "algo-2"}]),
            st.just([{"Value": "r1", "Name": "Run"}, {"Name": "Host", "Value": "algo-1"}]),
            st.just([{"Name": "Host", "Value": "algo-1"}, {"Name": "Run", "Value": "r1"}]),
            st.lists(dimension, max_size=3), st.just(None), st.just("Host=a"), st.just([["Host", "a"]])))
    if draw(st.integers(0, 9)):
        found["Value"] = draw(st.floats(-1e6, 1e6) | st.integers(-1000, 1000)) if draw(st.booleans()) \
            else draw(numbers)
    if not draw(st.integers(0, 19)):
        found[draw(st.sampled_from(["Values", "StatisticValues", "Counts"]))] = draw(st.sampled_from(
            [[1.0, 2.0], {"SampleCount": 2, "Sum": 3, "Minimum": 1, "Maximum": 2}, [1, 1], None]))
    if draw(st.booleans()):
        found["Timestamp"] = draw(stamps) if draw(st.booleans()) else NOW_S - draw(st.floats(0, 86_400))
    if draw(st.booleans()):
        found["Unit"] = draw(st.sampled_from(["Percent", "Count", "None", "Parsecs", None, ["Count"]]))
    if draw(st.booleans()):
        found["StorageResolution"] = draw(st.sampled_from([1, 60, 1, 60, 5, True, 1.0, None, "1"]))
    return found


def _rows(items: list[tuple[MetricKey, int, list[Any]]]) -> list[tuple[Any, ...]]:
    """parse_put's samples as sortable rows."""
    return sorted((repr(key), resolution, s.unit, s.timestamp_ms, s.count, s.sum, s.minimum, s.maximum,
                   "nan" if s.value is None else s.value) for key, resolution, samples in items for s in samples)


def _column_rows(found: Any) -> list[tuple[Any, ...]]:
    count, total, low, high = found.stats if found.stats is not None else (np.ones(len(found)), *[found.value] * 3)
    rows = []
    for index, code in enumerate(found.codes.tolist()):
        key, resolution, unit = found.metrics[code]
        value = float(found.value[index])
        rows.append((repr(key), resolution, unit, int(found.timestamp_ms[index]), float(count[index]),
                     float(total[index]), float(low[index]), float(high[index]), "nan" if math.isnan(value) else value))
    return sorted(rows)


def _outcome(parse: Any, data: Any) -> tuple[str, Any]:
    try:
        return "ok", parse(data)
    except TrainmonError as exc:
        return type(exc).__name__, exc.message


@settings(max_examples=400, deadline=None)
@given(data=st.lists(item(), min_size=1, max_size=25))
def test_a_call_as_columns_is_what_parse_put_accepts_and_refuses(data: list[dict[str, Any]]) -> None:
    """The column path accepts exactly what parse_put accepts, with the same datapoints, and a
    refused call gets parse_put's error word for word (the first item at fault)."""
    theirs = _outcome(lambda d: parse_put("Test", d, NOW_S), data)
    mine = _outcome(lambda d: parse_datapoints("Test", d, NOW_S), data)
    if theirs[0] != "ok":
        assert mine == theirs
        return
    assert mine[0] == "ok" and _column_rows(mine[1]) == _rows(theirs[1])


@pytest.mark.parametrize("data", [
    [{"MetricName": "loss", "Value": 0.5}],
    [{"MetricName": "loss", "Value": 1, "Dimensions": DIMS, "Timestamp": NOW_S - 60, "Unit": "Count",
      "StorageResolution": 1}] * 3,
    [{"MetricName": "loss", "Value": 0.5, "Timestamp": datetime.fromtimestamp(NOW_S - 60, UTC)},
     {"MetricName": "loss", "Value": 0.5, "Timestamp": datetime.fromtimestamp(NOW_S - 60)}],  # naive: UTC
    [{"MetricName": f"m{i}", "Value": float(i), "Dimensions": [{"Name": "Host", "Value": "a"},
                                                               {"Name": "Run", "Value": str(i % 3)}]}
     for i in range(50)],
])
def test_boto3s_usual_calls_take_the_column_path(data: list[dict[str, Any]]) -> None:
    found = _plain("Test", data, NOW_S)
    assert found is not None and _column_rows(found) == _rows(parse_put("Test", data, NOW_S))


@pytest.mark.parametrize(("item", "error", "text"), [
    ({"MetricName": "m", "Value": 10**400}, InvalidParameterValue, "-2^360 to 2^360"),
    ({"MetricName": "m", "Value": 1, "Unit": ["Count"]}, InvalidParameterValue, "not a valid unit"),
    ({"MetricName": ["m"], "Value": 1}, InvalidParameterValue, "MetricName must be 1 to 255 characters"),
    ({"MetricName": "m", "Value": 1, "Dimensions": [{"Name": "a", "Value": ["x"]}]}, InvalidParameterValue,
     "Value must be 1 to 1024 printable ASCII characters"),
    ({"MetricName": "m", "Value": 1, "StorageResolution": None}, InvalidParameterValue, "[ 1, 60 ]"),
])
def test_odd_items_are_refused_in_cloudwatchs_words(item: dict[str, Any], error: type, text: str) -> None:
    with pytest.raises(error) as refused:
        parse_datapoints("Test", [{"MetricName": "ok", "Value": 1}, item], NOW_S)
    assert text in refused.value.message and ".member.2." in refused.value.message


# -- numbers of any real type ---------------------------------------------------------------------------


class _Ratio(float):
    """A float subclass."""


# (kind, whole numbers only): each converts a Python number to its type
NUMBER_KINDS = {
    "numpy.float64": (np.float64, False), "numpy.float32": (np.float32, False), "numpy.longdouble": (np.longdouble, False),
    "numpy.int64": (np.int64, True), "numpy.uint32": (np.uint32, True), "Decimal": (lambda x: Decimal(repr(x)), False),
    "Fraction": (Fraction, False), "int subclass": (_Steps, True), "float subclass": (_Ratio, False),
}


def _typed_call(kind: Any, whole: bool, start_s: float, name: str) -> list[dict[str, Any]]:
    """300 datapoints of 3 metrics, a timestamp and a value each of ``kind`` (a fraction of a second
    apart, and fractional values, unless the kind holds whole numbers only; the timestamps of
    numpy.float32, which keeps times to 128 s, as numpy.float64)."""
    stamp = np.float64 if kind is np.float32 else kind
    return [{"MetricName": f"{name}{i % 3}", "Dimensions": DIMS, "StorageResolution": 1,
             "Timestamp": stamp(int(start_s) + i if whole else start_s + i * 0.37),
             "Value": kind(i * 7 % 250 if whole else i / 7 - 3.3)} for i in range(300)]


@pytest.mark.parametrize("kind", NUMBER_KINDS)
def test_timestamps_and_values_of_any_real_type_take_the_column_path_as_their_floats(kind: str) -> None:
    """Each type is accepted where CloudWatch takes a number, read as ``float`` reads it, on the
    column path (no item-by-item fallback: the speed of Python floats)."""
    convert, whole = NUMBER_KINDS[kind]
    data = _typed_call(convert, whole, NOW_S - 3600, "m")
    as_floats = [{**item, "Timestamp": float(item["Timestamp"]), "Value": float(item["Value"])} for item in data]
    found = _plain("Test", data, NOW_S)
    assert found is not None
    assert _column_rows(found) == _column_rows(_plain("Test", as_floats, NOW_S)) == _rows(parse_put("Test", data, NOW_S))
    if kind.startswith("numpy.float") or kind == "Decimal":  # the forms a statistic set or Values list take too
        statistic = {"MetricName": "s", "Timestamp": convert(NOW_S - 60), "Values": [convert(0.5), convert(2.5)],
                     "Counts": [convert(2.0), convert(1.0)]}
        [(_key, _resolution, samples)] = parse_put("Test", [statistic], NOW_S)
        assert [(s.value, s.count) for s in samples] == [(0.5, 2.0), (2.5, 1.0)]


@pytest.mark.parametrize("kind", NUMBER_KINDS)
def test_numbers_of_any_real_type_are_stored_as_their_floats(store_target: StoreTarget, kind: str) -> None:
    convert, whole = NUMBER_KINDS[kind]
    start_s = time.time() - 1800
    with _manual(store_target) as (store, clock):
        client = CloudWatchClient(store)
        typed = _typed_call(convert, whole, start_s, "typed")
        client.put_metric_data(Namespace="App", MetricData=typed)
        client.put_metric_data(Namespace="App", MetricData=[
            {**item, "MetricName": "plain" + item["MetricName"][-1], "Timestamp": float(item["Timestamp"]),
             "Value": float(item["Value"])} for item in typed])
        stamp = np.float64 if convert is np.float32 else convert  # (float32 keeps times to 128 s only)
        client.put_metric_data(Namespace="App", MetricData=[  # a resolution of numpy's: stored as 1
            {"MetricName": "resolved", "Value": convert(1), "StorageResolution": np.int64(1), "Timestamp": stamp(
                int(start_s))}])
        clock.advance(0.2)
        for metric in range(3):
            asked = {"Namespace": "App", "Dimensions": DIMS, "StartTime": start_s - 60, "EndTime": start_s + 900,
                     "Period": 1, "Statistics": ["SampleCount", "Sum", "Minimum", "Maximum"]}
            mine = client.get_metric_statistics(MetricName=f"typed{metric}", **asked)["Datapoints"]
            theirs = client.get_metric_statistics(MetricName=f"plain{metric}", **asked)["Datapoints"]
            assert len(mine) > 50 and sorted(mine, key=str) == sorted(theirs, key=str)
        [resolved] = client.get_metric_statistics(Namespace="App", MetricName="resolved", StartTime=start_s - 60,
                                                  EndTime=start_s + 60, Period=1, Statistics=["Sum"])["Datapoints"]
        assert resolved["Sum"] == 1.0
    assert _stored(store_target) == 601


def _refusal(item: dict[str, Any]) -> tuple[str, Any]:
    return _outcome(lambda d: parse_datapoints("Test", d, NOW_S), [{"MetricName": "ok", "Value": 1}, item])


@pytest.mark.parametrize(("odd", "plain"), [
    ({"Value": np.float64("nan")}, {"Value": math.nan}),
    ({"Value": Decimal("NaN")}, {"Value": math.nan}),
    ({"Value": Decimal("sNaN")}, {"Value": math.nan}),
    ({"Value": np.float32("inf")}, {"Value": math.inf}),
    ({"Value": Decimal("-Infinity")}, {"Value": -math.inf}),
    ({"Value": np.float64(2.0**361)}, {"Value": 2.0**361}),
    ({"Value": Decimal(2.0**361)}, {"Value": 2.0**361}),
    ({"Value": Decimal("1e400")}, {"Value": 10**400}),  # beyond a float: no infinity
    ({"Value": Fraction(10**400, 3)}, {"Value": 10**400}),
    ({"Value": np.longdouble("1e400")}, {"Value": 10**400}),
    ({"Value": np.bool_(True)}, {"Value": True}),  # not a number, as bool is not
    ({"Value": 1 + 0j}, {"Value": True}),  # nor a complex number
    ({"Values": [np.float64(1.5), Decimal("NaN")]}, {"Values": [1.5, math.nan]}),
    ({"Values": [Decimal("sNaN")]}, {"Values": [math.nan]}),
    ({"Values": [1.0], "Counts": [np.int64(-1)]}, {"Values": [1.0], "Counts": [-1]}),
    ({"StatisticValues": {"SampleCount": np.int64(0), "Sum": Decimal(0), "Minimum": 0, "Maximum": 0}},
     {"StatisticValues": {"SampleCount": 0, "Sum": 0, "Minimum": 0, "Maximum": 0}}),
    ({"Value": 1, "Timestamp": np.float64(NOW_S - 15 * 86_400)}, {"Value": 1, "Timestamp": NOW_S - 15 * 86_400}),
    ({"Value": 1, "Timestamp": np.int64(int(NOW_S) + 3 * 3600)}, {"Value": 1, "Timestamp": int(NOW_S) + 3 * 3600}),
    ({"Value": 1, "Timestamp": Decimal("NaN")}, {"Value": 1, "Timestamp": math.nan}),
    ({"Value": 1, "Timestamp": Decimal("1e400")}, {"Value": 1, "Timestamp": 10**400}),
    ({"Value": 1, "Timestamp": np.bool_(True)}, {"Value": 1, "Timestamp": True}),
    ({"Value": 1, "StorageResolution": np.int64(5)}, {"Value": 1, "StorageResolution": 5}),
], ids=["float64 nan", "Decimal NaN", "Decimal sNaN", "float32 inf", "Decimal -Infinity", "float64 2^361",
        "Decimal 2^361", "Decimal 1e400", "Fraction 1e400/3", "longdouble 1e400", "numpy.bool_", "complex",
        "Values with a Decimal NaN", "Values with a Decimal sNaN", "Counts int64 -1", "SampleCount int64 0",
        "Timestamp float64 15 days back", "Timestamp int64 3 hours ahead", "Timestamp Decimal NaN",
        "Timestamp Decimal 1e400", "Timestamp numpy.bool_", "StorageResolution int64 5"])
def test_a_number_of_any_type_is_refused_in_the_words_its_float_gets(odd: dict[str, Any], plain: dict[str, Any]) -> None:
    refused = _refusal({"MetricName": "m", **odd})
    assert refused[0] != "ok" and refused == _refusal({"MetricName": "m", **plain})


def test_cloudwatchs_words_for_numbers_are_unchanged() -> None:
    assert _refusal({"MetricName": "m", "Value": np.bool_(False)}) == (
        "InvalidParameterValue", "The parameter MetricData.member.2.Value must be a number.")
    assert _refusal({"MetricName": "m", "Value": Decimal("NaN")}) == (
        "InvalidParameterValue", "The value nan for parameter MetricData.member.2.Value is invalid: NaN and "
        "infinities are not accepted.")
    assert _refusal({"MetricName": "m", "Value": Decimal("-1e400")}) == (
        "InvalidParameterValue", "The value for parameter MetricData.member.2.Value is out of range: values must be "
        "within -2^360 to 2^360.")
    assert _refusal({"MetricName": "m", "Value": 1, "Timestamp": True}) == (
        "InvalidParameterValue", "The parameter MetricData.member.2.Timestamp must be a timestamp (a datetime, ISO "
        "8601 text or epoch seconds).")


# -- the buffer, in each backend ----------------------------------------------------------------------


def _stored(target: StoreTarget) -> int:
    """Datapoints (rows: a statistic set is one) in the database, read with its own driver (no
    trainmon connection: none writes the queue first)."""
    sql = "SELECT coalesce(sum(count), 0) FROM chunks WHERE kind = 1"
    if target.backend == "sqlite":
        with sqlite3.connect(target.home / "trainmon.db") as db:
            return int(db.execute(sql).fetchone()[0])
    import psycopg

    with psycopg.connect(target.database_url) as db:
        row = db.execute(sql).fetchone()
        return int(row[0]) if row else 0


def _items(count: int, start_s: float, name: str = "loss") -> list[dict[str, Any]]:
    return [{"MetricName": name, "Dimensions": DIMS, "Value": float(i % 7), "Timestamp": start_s + i * 0.01,
             "StorageResolution": 1} for i in range(count)]


def _put(client: Any, count: int, start_s: float, name: str = "loss") -> None:
    items = _items(count, start_s, name)
    for first in range(0, count, 1000):
        client.put_metric_data(Namespace="App", MetricData=items[first:first + 1000])


def _sample_count(client: Any, start_s: float, name: str = "loss") -> float:
    found = client.get_metric_statistics(Namespace="App", MetricName=name, Dimensions=DIMS, StartTime=start_s - 60,
                                         EndTime=time.time() + 60, Period=3600, Statistics=["SampleCount"])
    return sum(point["SampleCount"] for point in found["Datapoints"])


@contextmanager
def _manual(target: StoreTarget, retention: Retention | None = None,
            **settings: Any) -> Iterator[tuple[Store, ManualClock]]:
    """A store whose background work (the buffer's writes, the maintainer it starts) moves only when
    the test moves its clock; its maintainer is stopped afterwards."""
    clock = ManualClock(wall_s=time.time())
    store = open_store(target.home, database_url=target.database_url, retention=retention, clock=clock,
                       write_behind=WriteBehind(**settings))
    try:
        yield store, clock
    finally:
        running = maintenance.running_for(store)
        if running is not None:
            running.stop()
        store.close()


def test_datapoints_are_written_together_on_the_writers_clock(store_target: StoreTarget) -> None:
    with _manual(store_target, every_s=0.2, flush_samples=5_000) as (store, clock):
        client = CloudWatchClient(store)
        start_s = time.time() - 600
        _put(client, 3000, start_s)
        assert _stored(store_target) == 0  # queued: nothing written yet
        clock.advance(0.2)
        assert _stored(store_target) == 3000
        assert store._read("SELECT count(*) FROM chunks")[0][0] == 1  # type: ignore[attr-defined]  # 3 calls, 1 chunk
        _put(client, 5000, start_s + 30)  # flush_samples reached: written without waiting for the interval
        clock.advance(0)  # (time stands still: once the writer waits again)
        assert _stored(store_target) == 8000


def test_calls_of_every_form_written_together_keep_their_statistics(store_target: StoreTarget) -> None:
    with _manual(store_target) as (store, clock):
        client = CloudWatchClient(store)
        stamp = time.time() - 600
        client.put_metric_data(Namespace="App", MetricData=_items(3, stamp))  # values 0, 1, 2
        client.put_metric_data(Namespace="App", MetricData=[
            {"MetricName": "loss", "Dimensions": DIMS, "Timestamp": stamp, "StorageResolution": 1,
             "StatisticValues": {"SampleCount": 4, "Sum": 20, "Minimum": 3, "Maximum": 7}},
            {"MetricName": "loss", "Dimensions": DIMS, "Timestamp": stamp, "StorageResolution": 1,
             "Values": [10, 11], "Counts": [2, 1]},
            {"MetricName": "loss", "Dimensions": DIMS, "Timestamp": stamp, "StorageResolution": 1,
             "Value": 5, "Unit": "Seconds"}])
        clock.advance(0.2)
        assert store._read("SELECT unit, count FROM chunks ORDER BY unit") == [  # type: ignore[attr-defined]
            ("None", 6), ("Seconds", 1)]  # a chunk per unit for both calls, a row per datapoint
        [point] = client.get_metric_statistics(
            Namespace="App", MetricName="loss", Dimensions=DIMS, StartTime=stamp - 60, EndTime=stamp + 60,
            Period=3600, Statistics=["SampleCount", "Sum", "Minimum", "Maximum"], Unit="None")["Datapoints"]
        assert (point["SampleCount"], point["Sum"], point["Minimum"], point["Maximum"]) == (10, 54, 0, 11)


def test_another_process_sees_the_datapoints_within_a_bounded_wait(store_target: StoreTarget) -> None:
    store = store_target.open()
    try:
        _put(CloudWatchClient(store), 2000, time.time() - 600)
        waited = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            import time
            from pathlib import Path
            from trainmon.cloudwatch.model import MetricKey
            from trainmon.store import open_store
            store = open_store(Path({str(store_target.home)!r}), database_url={store_target.database_url!r})
            key = MetricKey("App", "loss", (("Host", "algo-1"),))
            started = time.monotonic()
            while sum(len(c.timestamp_ms) for c in store.metric_columns(key, 0, 2**62).values()) < 2000:
                assert time.monotonic() < started + 30, "not stored within 30 s"
                time.sleep(0.01)
            print(time.monotonic() - started)
            """)], capture_output=True, text=True, timeout=120)
        assert waited.returncode == 0, waited.stderr
    finally:
        store.close()


def test_a_process_reads_what_it_queued_whichever_store_object_it_reads_through(store_target: StoreTarget) -> None:
    with _manual(store_target) as (store, _clock):  # the clock never moves: only reads write the queue
        start_s = time.time() - 600
        _put(CloudWatchClient(store), 1500, start_s)
        assert _stored(store_target) == 0
        other = store_target.open()  # a second object on the same database, as a second client has
        try:
            assert _sample_count(CloudWatchClient(other), start_s) == 1500
        finally:
            other.close()
        assert _stored(store_target) == 1500
        _put(CloudWatchClient(store), 10, start_s + 60, name="acc")
        assert [m["MetricName"] for m in CloudWatchClient(store).list_metrics(Namespace="App")["Metrics"]] == [
            "acc", "loss"]
        _put(CloudWatchClient(store), 10, start_s + 60, name="lr")
        data = CloudWatchClient(store).get_metric_data(StartTime=start_s - 60, EndTime=time.time(), MetricDataQueries=[
            {"Id": "lr", "MetricStat": {"Metric": {"Namespace": "App", "MetricName": "lr", "Dimensions": DIMS},
                                        "Period": 3600, "Stat": "SampleCount"}}])
        assert sum(data["MetricDataResults"][0]["Values"]) == 10


def test_close_writes_what_the_store_object_queued(store_target: StoreTarget) -> None:
    with _manual(store_target) as (store, _clock):
        _put(CloudWatchClient(store), 1200, time.time() - 600)
        assert _stored(store_target) == 0
    assert _stored(store_target) == 1200


def test_a_process_that_exits_without_closing_stores_what_it_put(store_target: StoreTarget) -> None:
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from trainmon.sdk.clients import CloudWatchClient
        from trainmon.store import WriteBehind, open_store
        store = open_store(Path({str(store_target.home)!r}), database_url={store_target.database_url!r},
                           write_behind=WriteBehind(every_s=3600))  # only the exit writes
        items = [{{"MetricName": "loss", "Dimensions": [{{"Name": "Host", "Value": "algo-1"}}], "Value": 1.0,
                  "Timestamp": time.time() - 600 + i * 0.01, "StorageResolution": 1}} for i in range(2500)]
        for first in range(0, 2500, 1000):
            CloudWatchClient(store).put_metric_data(Namespace="App", MetricData=items[first:first + 1000])
        """)], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert _stored(store_target) == 2500


def test_late_datapoints_written_together_are_merged_into_the_rollups(store_target: StoreTarget) -> None:
    now = int(time.time())
    start = (now // 3600 - 3) * 3600
    with _manual(store_target, retention=parse("forever")) as (store, clock):  # nothing expires meanwhile
        client = CloudWatchClient(store)
        _put(client, 2000, start + 60)
        assert store.maintain(now * 1000).rolled_series == 0  # the write rolled its datapoints up
        _put(client, 1000, start + 120)  # late, in two calls written in one transaction
        _put(client, 500, start + 3600 + 60)
        _put(client, 300, now - 30)  # and a current one beside them
        clock.advance(0.2)
        assert _stored(store_target) == 3800
        rolled = store.metric_data(MetricKey("App", "loss", (("Host", "algo-1"),)), start * 1000,
                                   (start + 7200) * 1000, 3600, sketches=False)[0]
        assert rolled is not None and rolled["None"].count.tolist() == [3000, 500]  # from the stored tiers
        assert _sample_count(client, start) == 3800


@pytest.fixture
def sqlite_target(tmp_path: Path) -> StoreTarget:
    home = tmp_path / "store-home"
    home.mkdir()
    return StoreTarget("sqlite", home, "")


def test_the_writer_keeps_datapoints_through_a_server_outage_and_stores_them_once(
        tmp_path: Path, postgres_server: PostgresServer, postgres_url: str) -> None:
    target = StoreTarget("postgres", tmp_path, postgres_url)
    with _manual(target) as (store, clock):
        client = CloudWatchClient(store)
        start_s = time.time() - 600
        postgres_server.stop()
        try:
            _put(client, 2000, start_s)  # validated and queued: the store is not needed yet
            clock.advance(0.2)  # the writer tries, is refused, and waits its backoff
            [queued] = of_database(store.database_key)
            assert queued.error is not None and "cannot reach" in queued.error.message and queued.held == 2000
            _put(client, 1000, start_s + 30)
        finally:
            postgres_server.start()
        clock.advance(5)  # the next try, after its backoff: the refused batch first, checked, then the rest
        assert queued.error is None and queued.held == 0
        assert _stored(target) == 3000


def test_a_locked_store_keeps_what_the_buffer_holds_and_a_full_buffer_refuses_calls(
        sqlite_target: StoreTarget) -> None:
    store_target = sqlite_target
    store = open_store(store_target.home, database_url="", write_behind=WriteBehind(
        every_s=0.01, most_samples=2000, full_wait_s=0.2))
    client = CloudWatchClient(store)
    start_s = time.time() - 600
    _put(client, 10, start_s)
    store.flush_samples()  # the file exists, with its tables
    with sqlite_locked(store_target.home):  # another process writes, for as long as it likes
        _put(client, 2000, start_s + 10)
        with pytest.raises(Throttling) as throttled:
            client.put_metric_data(Namespace="App", MetricData=_items(1, start_s + 60, "refused"))
        assert throttled.value.code == "Throttling" and throttled.value.http_status == 400
        assert "2,000 datapoints are waiting to be stored" in throttled.value.message
    deadline = time.monotonic() + 60
    while _stored(store_target) < 2010 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _stored(store_target) == 2010
    assert _sample_count(client, start_s) == 2010 and _sample_count(client, start_s, "refused") == 0
    store.close()


def test_invalid_calls_write_nothing_and_do_not_disturb_what_is_queued(store_target: StoreTarget) -> None:
    with _manual(store_target) as (store, _clock):
        client = CloudWatchClient(store)
        start_s = time.time() - 600
        _put(client, 100, start_s)
        with pytest.raises(MissingParameter, match="MetricData.member.6 needs one of Value"):
            client.put_metric_data(Namespace="App", MetricData=[*_items(5, start_s), {"MetricName": "loss"}])
        assert _sample_count(client, start_s) == 100


def test_datapoints_that_cannot_be_stored_are_reported_not_lost_in_silence(sqlite_target: StoreTarget) -> None:
    store_target = sqlite_target
    with _manual(store_target) as (store, clock):
        client = CloudWatchClient(store)
        _put(client, 300, time.time() - 600)
        for path in store_target.home.glob("trainmon.db*"):
            path.unlink()  # the data directory cleaned away under a running process
        clock.advance(0.2)
        with pytest.raises(StoreError, match="300 datapoints accepted by PutMetricData could not be stored"):
            _put(client, 1, time.time() - 60)
        _put(client, 1, time.time() - 60)  # reported once; the writer goes on (and fails again, reported again)
        clock.advance(0.2)
        with pytest.raises(StoreError, match="1 datapoints accepted by PutMetricData could not be stored"):
            store.flush_samples()


# -- the maintainer of a writing process --------------------------------------------------------------


def test_a_writing_process_starts_one_maintainer_for_its_store(store_target: StoreTarget) -> None:
    with _manual(store_target) as (store, clock):
        assert maintenance.running_for(store) is None
        client = CloudWatchClient(store)
        _put(client, 2000, time.time() - 900)  # old enough to be sealed at once
        started = maintenance.running_for(store)
        assert isinstance(started, Maintainer) and started._alarm_pass is None  # alarms stay the servers'
        _put(client, 10, time.time() - 900)
        other = store_target.open()
        try:
            _put(CloudWatchClient(other), 10, time.time() - 900)  # another client of the same database
            assert maintenance.running_for(other) is started
        finally:
            other.close()
        clock.advance(FIRST_AFTER_S)  # its first pass: what was queued is written, then sealed
        assert started.error is None and [done.sealed_points for done in started.passes] == [2020]


def test_no_maintainer_is_started_where_the_process_runs_one(store_target: StoreTarget) -> None:
    with _manual(store_target) as (store, clock):
        server = Maintainer(store, alarm_pass=evaluate_alarms, clock=clock)  # as trainmon server runs it
        clock.start(server)
        try:
            _put(CloudWatchClient(store), 10, time.time() - 60)
            assert maintenance.running_for(store) is server
        finally:
            server.stop()
        assert maintenance.running_for(store) is None
