"""The numbers of GetMetricStatistics and GetMetricData, computed from the store.

:func:`datapoints` gives CloudWatch's datapoints per period of one metric (from the roll-ups
where a tier serves the period, else from the datapoints as written); :func:`metric_periods`
gives a MetricStat's value per period, as an alarm on one metric evaluates it; and
:func:`query_results` computes checked GetMetricData queries (:class:`DataQuery`: MetricStats
and metric math over them), as GetMetricData returns them and as an alarm on metric math
evaluates them. Checking the requests and shaping the answers is the operations layer's
(``api/cloudwatch.py``, ``api/metric_queries.py``, ``api/alarms.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from ..cloudwatch.expressions import Evaluator, Expression, Series, render_label, result_labels
from ..cloudwatch.model import FUTURE_LIMIT_S, MetricKey
from ..cloudwatch.statistics import STATISTICS, aggregate_columns, aggregate_rollups, aligned_start, concat_columns
from ..errors import InvalidParameterValue
from ..store import Store


@dataclass(frozen=True, slots=True)
class MetricStat:
    key: MetricKey
    period: int
    stat: str  # one of STATISTICS or a percentile such as p99.9
    unit: str | None


@dataclass(frozen=True, slots=True)
class DataQuery:
    id: str
    label: str | None
    return_data: bool
    metric: MetricStat | None = None
    expression: Expression | None = None


def datapoints(store: Store, key: MetricKey, start_ms: int, end_ms: int, period: int, statistics: list[str],
               percentiles: list[str], unit: str | None, *, any_unit: bool = False) -> list[dict[str, Any]]:
    """CloudWatch's datapoints per period: from the roll-ups where a tier serves the period,
    else from the datapoints as written. ``any_unit``: one datapoint per period, whatever
    units the data was put with (reported as None)."""
    arguments: dict[str, Any] = dict(start_ms=start_ms, end_ms=end_ms, period_s=period, statistics=statistics,
                                     percentiles=percentiles, unit=unit)
    rollups, columns = store.metric_data(key, start_ms, end_ms, period, sketches=bool(percentiles))
    if rollups is not None:
        if any_unit:
            from ..cloudwatch.sketch import concat

            rollups = {"None": concat(list(rollups.values()))}
        return aggregate_rollups(rollups, **arguments)
    if any_unit and columns:
        columns = {"None": concat_columns(list(columns.values()))}
    return aggregate_columns(columns, **arguments)


def metric_periods(store: Store, key: MetricKey, start_ms: int, end_ms: int, period: int, stat: str,
                   unit: str | None) -> dict[int, tuple[float, float]]:
    """Per period start (epoch ms, periods from ``start_ms``): a MetricStat's value of ``stat`` (a
    statistic or a percentile) and the period's SampleCount, as GetMetricData computes the
    MetricStat (what an alarm on one metric evaluates). Periods without data, or whose percentile
    is unavailable, are left out."""
    percentile = stat not in STATISTICS
    statistics = list(dict.fromkeys(["SampleCount", *([] if percentile else [stat])]))
    rows = datapoints(store, key, start_ms, end_ms, period, statistics, [stat] if percentile else [], unit,
                      any_unit=unit is None)
    found: dict[int, tuple[float, float]] = {}
    for row in rows:
        value = row.get("ExtendedStatistics", {}).get(stat) if percentile else row[stat]
        if value is not None:
            found[round(row["Timestamp"] * 1000)] = (float(value), float(row["SampleCount"]))
    return found


def query_results(store: Store, queries: list[DataQuery], order: list[str], start_s: float, end_s: float,
                  now_s: float) -> list[tuple[str, str, Series]]:
    """(Id, Label, series) of every returned result of checked queries, in the order of the
    queries, as GetMetricData computes them; ``order`` computes each expression after its inputs."""
    metrics = {q.id: _series(store, q, q.metric, start_s, end_s, now_s) for q in queries if q.metric is not None}
    expressions = {q.id: q.expression for q in queries if q.expression is not None}
    evaluator = Evaluator(metrics, expressions, order, partial(_slots, start_s, end_s, now_s))
    results: list[tuple[str, str, Series]] = []
    for query in queries:
        if not query.return_data:
            continue
        if query.id in metrics:
            results.append((query.id, metrics[query.id].label, metrics[query.id]))
            continue
        value = evaluator.value(query.id)
        if isinstance(value, float):
            raise InvalidParameterValue(
                f"Error in expression {query.id}: its result is a number, and a returned result must be a time "
                "series or an array of time series (e.g. m1 - AVG(m1)); or set ReturnData to false."
            )
        results.extend((query.id, label, series) for label, series in result_labels(query.id, query.label, value))
    return results


def _series(store: Store, query: DataQuery, stat: MetricStat, start_s: float, end_s: float, now_s: float) -> Series:
    """One MetricStat's series, computed as GetMetricStatistics computes its datapoints."""
    start = aligned_start(start_s, stat.period, now_s)
    points = {} if start is None else _stat_points(store, stat, int(start * 1000), int(end_s * 1000))
    series = Series(stat.key.name, points, stat.period, _props(stat))
    if query.label is None:
        return series
    return replace(series, label=render_label(query.label, stat.key.name, series))


def _stat_points(store: Store, stat: MetricStat, start_ms: int, end_ms: int) -> dict[int, float]:
    found = metric_periods(store, stat.key, start_ms, end_ms, stat.period, stat.stat, stat.unit)
    return {start: value for start, (value, _) in found.items()}


def _props(stat: MetricStat) -> dict[str, str]:
    """What ``${PROP('...')}`` in a label can show."""
    props = {"MetricName": stat.key.name, "Namespace": stat.key.namespace, "Period": str(stat.period),
             "Stat": stat.stat}
    props.update({f"Dim.{name}": value for name, value in stat.key.dimensions})
    return props


def _slots(start_s: float, end_s: float, now_s: float, period: int) -> range:
    """The period start times (epoch ms) FILL fills: the request's range, rounded as for the data, and
    ending where data can end (two hours from now)."""
    start = aligned_start(start_s, period, now_s)
    if start is None:
        return range(0)
    return range(int(start * 1000), int(min(end_s, now_s + FUTURE_LIMIT_S) * 1000), period * 1000)
