"""CloudWatch's statistics over raw datapoints, computed with arrays, against the plain definition:
a loop over the datapoints of each period."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmon.cloudwatch.statistics import Columns, aggregate_columns

STATS = ["SampleCount", "Average", "Sum", "Minimum", "Maximum"]
PERCENTILES = ["p0", "p10", "p50", "p90", "p99.9", "p100"]


def oracle(rows: list[tuple[int, float, float, float, float, float | None, str]], start_ms: int, end_ms: int,
           period_s: int) -> list[dict]:
    """Per period and unit: the statistics, and the percentiles (linear between the closest ranks of
    the values, each repeated its count) where no value is negative and no statistic set of
    several values is in the period."""
    buckets: dict[tuple[int, str], list] = {}
    for row in rows:
        stamp, *_, unit = row
        if start_ms <= stamp < end_ms:
            slot = start_ms + (stamp - start_ms) // (period_s * 1000) * period_s * 1000
            buckets.setdefault((slot, unit), []).append(row)
    points = []
    for (slot, unit), group in sorted(buckets.items()):
        count = sum(r[1] for r in group)
        total = sum(r[2] for r in group)
        point = {"Timestamp": slot / 1000, "Unit": unit, "SampleCount": count, "Sum": total,
                 "Average": total / count, "Minimum": min(r[3] for r in group), "Maximum": max(r[4] for r in group)}
        values = []
        for _, n, _, low, high, value, _ in group:
            known = value if value is not None else (low if n == 1 or low == high else None)
            values.append((known, n))
        if all(v is not None and v >= 0 for v, _ in values):
            ordered = sorted(values)
            total_count = sum(n for _, n in ordered)
            point["ExtendedStatistics"] = {}
            for name in PERCENTILES:
                position = float(name[1:]) / 100 * (total_count - 1)
                lower, upper = math.floor(position), math.ceil(position)
                seen, low_value, high_value, found = 0.0, ordered[-1][0], ordered[-1][0], False
                for v, n in ordered:
                    seen += n
                    if not found and seen > lower:
                        low_value, found = v, True
                    if seen > upper:
                        high_value = v
                        break
                point["ExtendedStatistics"][name] = low_value + (high_value - low_value) * (position - lower)
        points.append(point)
    return points


def as_columns(rows: list) -> dict[str, Columns]:
    by_unit: dict[str, list] = {}
    for row in sorted(rows, key=lambda r: r[0]):
        by_unit.setdefault(row[6], []).append(row)
    return {unit: Columns(np.array([r[0] for r in group], np.int64), np.array([r[1] for r in group]),
                          np.array([r[2] for r in group]), np.array([r[3] for r in group]),
                          np.array([r[4] for r in group]),
                          np.array([np.nan if r[5] is None else r[5] for r in group]))
            for unit, group in by_unit.items()}


values = st.floats(-50, 1e6, allow_nan=False).map(lambda v: round(v, 3))


@st.composite
def datapoint(draw: st.DrawFn) -> tuple:
    stamp = draw(st.integers(0, 3_600_000))
    unit = draw(st.sampled_from(["None", "Seconds"]))
    if draw(st.booleans()):
        value = draw(values)
        return (stamp, 1.0, value, value, value, value, unit)
    count = float(draw(st.integers(1, 20)))
    low = draw(values)
    high = low + draw(st.floats(0, 100).map(lambda v: round(v, 3)))
    if draw(st.booleans()):  # a value with a count (PutMetricData's Values and Counts)
        return (stamp, count, low * count, low, low, low, unit)
    return (stamp, count, (low + high) / 2 * count, low, high, None, unit)  # a statistic set


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(datapoint(), max_size=60), period_s=st.sampled_from([1, 60, 300, 3600]),
       start=st.integers(0, 600_000))
def test_statistics_over_raw_columns_are_the_loops(rows: list, period_s: int, start: int) -> None:
    start_ms = start - start % 1000
    end_ms = 3_600_001
    got = aggregate_columns(as_columns(rows), start_ms=start_ms, end_ms=end_ms, period_s=period_s,
                            statistics=STATS, percentiles=PERCENTILES)
    expected = oracle(rows, start_ms, end_ms, period_s)
    assert [(p["Timestamp"], p["Unit"]) for p in got] == [(p["Timestamp"], p["Unit"]) for p in expected]
    for mine, theirs in zip(got, expected, strict=True):
        for name in STATS:
            assert mine[name] == pytest.approx(theirs[name], rel=1e-12, abs=1e-9), name
        assert ("ExtendedStatistics" in mine) == ("ExtendedStatistics" in theirs)
        for name, value in theirs.get("ExtendedStatistics", {}).items():
            assert mine["ExtendedStatistics"][name] == pytest.approx(value, rel=1e-12, abs=1e-9), name


def test_one_unit_asked_for_leaves_the_others_out() -> None:
    rows = [(1000, 1.0, 2.0, 2.0, 2.0, 2.0, "Seconds"), (1500, 1.0, 5.0, 5.0, 5.0, 5.0, "None")]
    got = aggregate_columns(as_columns(rows), start_ms=0, end_ms=60_000, period_s=60, statistics=["Sum"],
                            unit="Seconds")
    assert got == [{"Timestamp": 0.0, "Unit": "Seconds", "Sum": 2.0}]
