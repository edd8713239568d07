"""CloudWatch's statistics per period, and its rules on periods and time ranges (pure).

:func:`period_table` is the plainer view of a job's own points that ``trainmon metrics`` and
``TrainingJobAnalytics`` show by default: count, average, minimum, maximum and the last value per
period, NaN and infinities counted but left out of the statistics.

A stored datapoint is a :class:`Sample`: a single value (count 1), a value with a count (the
``Values``/``Counts`` form), or a statistic set (count, sum, minimum, maximum) whose single
values are unknown. Percentiles use the known values, interpolated linearly between the two
nearest ranks (numpy's default method); they are unavailable for a period holding a negative
value or a statistic set of several different values, as in CloudWatch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import InvalidParameterCombination, InvalidParameterValue

if TYPE_CHECKING:
    import numpy as np

    from .sketch import Rollups

STATISTICS = ("SampleCount", "Average", "Sum", "Minimum", "Maximum")
SUB_MINUTE_PERIODS = (1, 5, 10, 20, 30)
MAX_DATAPOINTS = 1440
HOUR_S, DAY_S = 3600, 86_400
_PERCENTILE = re.compile(r"p(\d{1,3}(?:\.\d+)?)")


@dataclass(slots=True)  # not frozen: PutMetricData makes one per datapoint, and a frozen one costs 3x to make
class Sample:
    timestamp_ms: int
    count: float
    sum: float
    minimum: float
    maximum: float
    value: float | None  # the value each of ``count`` samples had, when known
    unit: str = "None"


def single(timestamp_ms: int, value: float, unit: str = "None", count: float = 1.0) -> Sample:
    return Sample(timestamp_ms, count, value * count, value, value, value, unit)


def percentile_of(stat: str) -> float:
    """``p99.9`` -> 99.9; InvalidParameterValue unless it is p0.0 to p100."""
    match = _PERCENTILE.fullmatch(stat)
    if not match or float(match.group(1)) > 100:
        raise InvalidParameterValue(
            f"The value {stat} for parameter ExtendedStatistics is not valid: use p0.0 to p100, e.g. p99 or p99.9."
        )
    return float(match.group(1))


def check_period(period: Any, field: str = "Period") -> int:
    if not isinstance(period, int) or isinstance(period, bool) or period < 1:
        raise InvalidParameterValue(f"The parameter {field} must be a positive integer number of seconds.")
    if period < 60 and period not in SUB_MINUTE_PERIODS:
        raise InvalidParameterValue(
            f"The parameter {field} must be 1, 5, 10, 20, 30 (high-resolution metrics only), 60 or a multiple of 60."
        )
    if period >= 60 and period % 60:
        raise InvalidParameterValue(f"The parameter {field} must be a multiple of 60.")
    return period


# CloudWatch serves data older than 63 days, 15 days and 3 hours only in periods that are multiples
# of 3600, 300 and 60 s.
_PERIODS_BY_AGE = ((63 * DAY_S, 3600), (15 * DAY_S, 300), (3 * HOUR_S, 60))


def least_period(age_s: float) -> int:
    """The period that periods over data this old must be a multiple of (1: any)."""
    return next((least for older_than, least in _PERIODS_BY_AGE if age_s > older_than), 1)


def aligned_start(start_s: float, period: int, now_s: float) -> float | None:
    """StartTime rounded as CloudWatch rounds it by age; None when the age rules give no data.

    Data older than 3 h is only served with periods that are multiples of 60, older than 15 days
    with multiples of 300, older than 63 days with multiples of 3600 (an empty answer otherwise).
    """
    least = least_period(now_s - start_s)
    if period % least:
        return None
    unit = least if least > 1 else min(period, 60)
    return math.floor(start_s / unit) * unit


def check_datapoint_count(start_s: float, end_s: float, period: int) -> None:
    requested = math.ceil(max(0.0, end_s - start_s) / period)
    if requested > MAX_DATAPOINTS:
        raise InvalidParameterCombination(
            f"You have requested up to {requested} datapoints, which exceeds the limit of {MAX_DATAPOINTS}. "
            "You may reduce the datapoints requested by increasing Period, or decreasing the time range."
        )


class Columns(NamedTuple):
    """Datapoints of one unit as columns, sorted by time: what :func:`aggregate_columns` takes.
    ``value`` is NaN for a statistic set (its single values unknown)."""

    timestamp_ms: np.ndarray
    sample_count: np.ndarray
    total: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray
    value: np.ndarray


def concat_columns(parts: Sequence[Columns]) -> Columns:
    """Datapoints in any order (chunks as stored, units taken together) as one :class:`Columns`,
    sorted by time; datapoints of one time keep their order. Parts already in order are not sorted
    again, and a single one comes back as it is."""
    import numpy as np

    joined = parts[0] if len(parts) == 1 else Columns(*(np.concatenate(column) for column in zip(*parts, strict=True)))
    stamps = joined.timestamp_ms
    if bool((stamps[1:] >= stamps[:-1]).all()):
        return joined
    order = np.argsort(stamps, kind="stable")
    return Columns(*(column[order] for column in joined))


def aggregate_columns(
    columns: dict[str, Columns],
    *,
    start_ms: int,
    end_ms: int,
    period_s: int,
    statistics: Iterable[str] = (),
    percentiles: Iterable[str] = (),
    unit: str | None = None,
) -> list[dict[str, Any]]:
    """One CloudWatch datapoint per period (start inclusive, end exclusive) that holds data, from
    the datapoints as written, vectorized: raw data that no roll-up holds yet costs about what a
    GROUP BY over the same rows does. Percentiles are exact: linear interpolation between the two
    nearest ranks of the values, each repeated its count (numpy's default method)."""
    import numpy as np  # here, not at import: the CLI's job and log commands never need it

    wanted = list(statistics)
    extended = [(p, percentile_of(p)) for p in percentiles]
    period_ms = period_s * 1000
    datapoints: list[dict[str, Any]] = []
    for row_unit, data in columns.items():
        if unit is not None and row_unit != unit:
            continue
        first, stop = np.searchsorted(data.timestamp_ms, (start_ms, end_ms)).tolist()  # sorted by time
        if first >= stop:
            continue
        inside = slice(first, stop)  # views: the periods are runs of the time order
        slots = start_ms + (data.timestamp_ms[inside] - start_ms) // period_ms * period_ms
        count, total = data.sample_count[inside], data.total[inside]
        low, high, value = data.minimum[inside], data.maximum[inside], data.value[inside]
        starts = np.flatnonzero(np.r_[True, slots[1:] != slots[:-1]])
        columns_out: dict[str, list[float]] = {}
        counts = np.add.reduceat(count, starts)
        sums = np.add.reduceat(total, starts)
        for name in wanted:
            columns_out[name] = {
                "SampleCount": counts,
                "Sum": sums,
                "Average": sums / np.where(counts == 0, 1, counts),
                "Minimum": np.minimum.reduceat(low, starts),
                "Maximum": np.maximum.reduceat(high, starts),
            }[name].tolist()
        rows: list[dict[str, Any]] = [{"Timestamp": slot / 1000.0, "Unit": row_unit}
                                      for slot in slots[starts].tolist()]
        for name, values in columns_out.items():
            for point, figure in zip(rows, values, strict=True):
                point[name] = figure
        if extended:
            _percentiles_into(rows, starts, count, low, high, value, extended)
        datapoints.extend(rows)
    if len(columns) > 1:
        datapoints.sort(key=lambda point: (point["Timestamp"], point["Unit"]))
    return datapoints


def _percentiles_into(rows: list[dict[str, Any]], starts: Any, count: Any, low: Any, high: Any, value: Any,
                      wanted: list[tuple[str, float]]) -> None:
    """Each period's percentiles into its row, where CloudWatch gives them (no negative value, no
    statistic set of several values): a period at a time (at most 1,440 of them), each percentile the
    value at its rank among the period's samples (counted), between the two ranks around it. Where
    every value counts once (a job's points), only those ranks are put in place (``numpy.partition``);
    else the values are sorted and their counts added up in that order."""
    import numpy as np

    known = np.where(np.isnan(value), np.where((count == 1) | (low == high), low, np.nan), value)
    names = [name for name, _ in wanted]
    shares = np.array([q / 100.0 for _, q in wanted])
    for row, begin, stop in zip(rows, starts.tolist(), [*starts[1:].tolist(), len(count)], strict=True):
        values, counts = known[begin:stop], count[begin:stop]
        if np.isnan(values).any() or (values < 0).any():
            continue
        each_once = bool((counts == 1).all())
        if each_once:
            positions = shares * (len(values) - 1)
        else:
            order = np.lexsort((counts, values))
            ordered, seen = values[order], np.cumsum(counts[order])
            positions = shares * (seen[-1] - 1)
        floors = np.floor(positions)
        below, above = floors.astype(np.int64), np.ceil(positions).astype(np.int64)  # the ranks around each
        if each_once:  # each value a rank: only the ranks wanted put in place
            ordered = np.partition(values, sorted({*below.tolist(), *above.tolist()}))
        else:  # each rank the first value whose counts, added up in order, pass it
            below, above = (np.minimum(np.searchsorted(seen, rank, side="right"), len(ordered) - 1)
                            for rank in (below, above))
        figures = ordered[below] + (ordered[above] - ordered[below]) * (positions - floors)
        row["ExtendedStatistics"] = dict(zip(names, figures.tolist(), strict=True))


def aggregate_rollups(
    rollups: dict[str, Rollups],
    *,
    start_ms: int,
    end_ms: int,
    period_s: int,
    statistics: Iterable[str] = (),
    percentiles: Iterable[str] = (),
    unit: str | None = None,
) -> list[dict[str, Any]]:
    """``aggregate_columns`` over roll-up rows (per unit): the same statistics, exactly, and percentiles
    from the merged sketches (within the sketch's relative accuracy; see cloudwatch/sketch.py)."""
    import numpy as np  # here, not at import: the CLI's job and log commands never need it

    wanted = list(statistics)
    extended = [(p, percentile_of(p) / 100.0) for p in percentiles]
    datapoints: list[dict[str, Any]] = []
    for row_unit, stored in rollups.items():
        if unit is not None and row_unit != unit:
            continue
        inside = (stored.timestamp_ms >= start_ms) & (stored.timestamp_ms < end_ms)
        if not inside.all():
            stored = stored.select(inside)
        periods = stored.roll(start_ms, period_s * 1000)
        columns: dict[str, Any] = {
            "SampleCount": periods.count, "Sum": periods.sum, "Minimum": periods.minimum, "Maximum": periods.maximum,
            "Average": periods.sum / np.where(periods.count == 0, 1, periods.count),
        }
        columns = {name: columns[name].tolist() for name in wanted}
        stamps = (periods.timestamp_ms / 1000.0).tolist()
        rows: list[dict[str, Any]] = [{"Timestamp": stamp, "Unit": row_unit} for stamp in stamps]
        for name in wanted:
            for point, value in zip(rows, columns[name], strict=True):
                point[name] = value
        if extended:
            quantiles = [periods.quantiles(q).tolist() for _, q in extended]
            names = [name for name, _ in extended]
            for index, (point, sketched) in enumerate(zip(rows, periods.sketched.tolist(), strict=True)):
                if sketched:
                    point["ExtendedStatistics"] = {name: values[index] for name, values in zip(names, quantiles,
                                                                                                strict=True)}
        datapoints.extend(rows)
    if len(rollups) > 1:
        datapoints.sort(key=lambda point: (point["Timestamp"], point["Unit"]))
    return datapoints


# -- a job's points per period ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeriodRow:
    name: str
    start_ms: int
    count: int        # every point, NaN and infinities included
    finite: int       # the points the statistics use
    average: float | None
    minimum: float | None
    maximum: float | None
    last: float       # the last value as emitted (may be NaN or infinite)


class Point(NamedTuple):
    """One point of a job's metric, as the per-period table takes it."""

    name: str
    timestamp_ms: int
    value: float


def period_table(points: Iterable[Point], period_s: int) -> list[PeriodRow]:
    """One row per metric and period holding at least one point, ordered by metric then time."""
    if period_s < 1:
        raise ValueError("period must be at least 1 second")
    period_ms = period_s * 1000
    buckets: dict[tuple[str, int], list[float]] = {}
    for point in points:
        start = point.timestamp_ms - point.timestamp_ms % period_ms
        buckets.setdefault((point.name, start), []).append(point.value)
    rows = []
    for (name, start), values in sorted(buckets.items()):
        finite = [v for v in values if math.isfinite(v)]
        rows.append(PeriodRow(
            name, start, len(values), len(finite),
            sum(finite) / len(finite) if finite else None,
            min(finite) if finite else None,
            max(finite) if finite else None,
            values[-1],
        ))
    return rows


def auto_period_s(first_ms: int, last_ms: int, rows_wanted: int = 20) -> int:
    """A round period giving about ``rows_wanted`` rows over the span."""
    span_s = max(1.0, (last_ms - first_ms) / 1000)
    for period in (1, 5, 10, 20, 30, 60, 300, 600, 1800, 3600, 21600, 86400):
        if span_s / period <= rows_wanted:
            return period
    return 86400
