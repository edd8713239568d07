"""``trainmon.client("cloudwatch")``: PutMetricData, GetMetricStatistics, ListMetrics with boto3's shapes.

Jobs' metrics appear as CloudWatch shows SageMaker's: namespace ``/aws/sagemaker/TrainingJobs``,
dimension ``TrainingJobName``, high resolution. Unlike CloudWatch, a new metric is listed at
once, and metrics stay listed after two weeks without data.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from ..errors import InvalidParameterCombination, InvalidParameterValue, MissingParameter
from ..store import SqliteStore
from .model import (
    MetricKey,
    check_dimensions,
    check_metric_name,
    check_namespace,
    check_unit,
    epoch_seconds,
    parse_put,
)
from .statistics import STATISTICS, aggregate, aligned_start, check_datapoint_count, check_period, percentile_of

LIST_PAGE = 500
RECENT_S = 3 * 3600


def _datetime(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


class CloudWatchClient:
    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    def put_metric_data(self, *, Namespace: str | None = None, MetricData: list[dict[str, Any]] | None = None,
                        **unsupported: Any) -> dict[str, Any]:
        _refuse(unsupported, allowed=("EntityMetricData", "StrictEntityValidation"))
        items = parse_put(Namespace, MetricData, time.time())
        self.store.put_samples(items)
        return {}

    def get_metric_statistics(
        self,
        *,
        Namespace: str | None = None,
        MetricName: str | None = None,
        Dimensions: list[dict[str, str]] | None = None,
        StartTime: Any = None,
        EndTime: Any = None,
        Period: int | None = None,
        Statistics: list[str] | None = None,
        ExtendedStatistics: list[str] | None = None,
        Unit: str | None = None,
        **unsupported: Any,
    ) -> dict[str, Any]:
        _refuse(unsupported)
        key = MetricKey(check_namespace(Namespace), check_metric_name(MetricName),
                        check_dimensions(Dimensions, "Dimensions"))  # type: ignore[arg-type]
        for field, value in (("StartTime", StartTime), ("EndTime", EndTime), ("Period", Period)):
            if value is None:
                raise MissingParameter(f"The parameter {field} is required.")
        start_s, end_s = epoch_seconds(StartTime, "StartTime"), epoch_seconds(EndTime, "EndTime")
        period = check_period(Period)
        statistics, extended = _statistics(Statistics, ExtendedStatistics)
        unit = check_unit(Unit, "Unit") if Unit is not None else None
        if end_s <= start_s:
            raise InvalidParameterValue("The parameter StartTime must be before EndTime.")
        start = aligned_start(start_s, period, time.time())
        if start is None:
            return {"Label": key.name, "Datapoints": []}
        check_datapoint_count(start, end_s, period)
        start_ms, end_ms = int(start * 1000), int(end_s * 1000)
        samples = self.store.metric_samples(key, start_ms, end_ms)
        datapoints = aggregate(samples, start_ms=start_ms, end_ms=end_ms, period_s=period, statistics=statistics,
                               percentiles=extended, unit=unit)
        for point in datapoints:
            point["Timestamp"] = _datetime(point["Timestamp"])
        return {"Label": key.name, "Datapoints": datapoints}

    def list_metrics(
        self,
        *,
        Namespace: str | None = None,
        MetricName: str | None = None,
        Dimensions: list[dict[str, str]] | None = None,
        NextToken: str | None = None,
        RecentlyActive: str | None = None,
        **unsupported: Any,
    ) -> dict[str, Any]:
        _refuse(unsupported, allowed=("IncludeLinkedAccounts", "OwningAccount"))
        if Namespace is not None:
            check_namespace(Namespace)
        if MetricName is not None:
            check_metric_name(MetricName)
        wanted = check_dimensions(Dimensions, "Dimensions", values_required=False, limit=10)
        if RecentlyActive not in (None, "PT3H"):
            raise InvalidParameterValue("The parameter RecentlyActive must be PT3H.")
        since_ms = (time.time() - RECENT_S) * 1000 if RecentlyActive else None
        metrics = []
        for key, last_ms in self.store.metric_keys(Namespace, MetricName):
            if since_ms is not None and last_ms < since_ms:
                continue
            present = dict(key.dimensions)
            if all(name in present and (value is None or present[name] == value) for name, value in wanted):
                metrics.append(key.to_api())
        start = int(NextToken) if NextToken and NextToken.isdigit() else 0
        result: dict[str, Any] = {"Metrics": metrics[start:start + LIST_PAGE]}
        if start + LIST_PAGE < len(metrics):
            result["NextToken"] = str(start + LIST_PAGE)
        return result


def _statistics(statistics: list[str] | None, extended: list[str] | None) -> tuple[list[str], list[str]]:
    if statistics and extended:
        raise InvalidParameterCombination("Must specify either Statistics or ExtendedStatistics, but not both.")
    if not statistics and not extended:
        raise MissingParameter("Must specify either Statistics or ExtendedStatistics.")
    if statistics:
        if len(statistics) > 5 or any(s not in STATISTICS for s in statistics):
            raise InvalidParameterValue(f"The parameter Statistics takes 1 to 5 of {', '.join(STATISTICS)}.")
        return list(dict.fromkeys(statistics)), []
    assert extended is not None
    if len(extended) > 10:
        raise InvalidParameterValue("The parameter ExtendedStatistics takes 1 to 10 percentiles.")
    for stat in extended:
        percentile_of(stat)
    return [], list(dict.fromkeys(extended))


def _refuse(unsupported: dict[str, Any], allowed: tuple[str, ...] = ()) -> None:
    unknown = sorted(set(unsupported) - set(allowed))
    if unknown:
        raise InvalidParameterValue(f"Unknown parameter(s): {', '.join(unknown)}.")
