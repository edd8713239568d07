"""CloudWatch's metric operations: PutMetricData, GetMetricStatistics, GetMetricData, ListMetrics, with boto3's shapes.

Jobs' metrics appear as CloudWatch shows SageMaker's: namespace ``/aws/sagemaker/TrainingJobs``,
dimension ``TrainingJobName``, high resolution. Unlike CloudWatch, a new metric is listed at
once, and metrics stay listed after two weeks without data.

This module checks each request and shapes its answer (GetMetricData's pages, its NextToken); the
numbers come from the read layer (:mod:`trainmon.read.metric_data`), and GetMetricData's queries
are checked by :mod:`.metric_queries`.
"""

from __future__ import annotations

import base64
import bisect
import json
import re
import time
from collections.abc import Callable
from typing import Any

from ..cloudwatch.datapoints import parse_datapoints
from ..cloudwatch.expressions import Series
from ..cloudwatch.model import (
    MetricKey,
    check_dimensions,
    check_metric_name,
    check_namespace,
    check_unit,
    epoch_seconds,
)
from ..cloudwatch.statistics import (
    STATISTICS,
    aligned_start,
    check_datapoint_count,
    check_period,
    percentile_of,
)
from ..errors import CloudWatchError, InvalidParameterCombination, InvalidParameterValue, MissingParameter
from ..read.metric_data import datapoints, query_results
from ..runtime.watch.maintenance import keep_maintained
from ..shapes import Problems, String, keyset_token, keyset_values, refuse_unknown, request_fingerprint
from ..store import Store
from .metric_queries import metric_queries, structure
from .times import as_datetime

LIST_PAGE = 500
RECENT_S = 3 * 3600
DEFAULT_MAX_DATAPOINTS = 100_800
SCAN_BY = ("TimestampDescending", "TimestampAscending")
_TIMEZONE = re.compile(r"[+-]\d{4}")


def put_metric_data(store: Store, *, Namespace: str | None = None, MetricData: list[dict[str, Any]] | None = None,
                    **unsupported: Any) -> dict[str, Any]:
    """Validated whole (a refused call writes nothing), then queued: the store writes calls together
    within a fraction of a second, and this process's reads see them at once (store.series.buffer). The
    first call makes sure the process maintains the store (runtime.watch.maintenance.keep_maintained)."""
    refuse_unknown(unsupported, InvalidParameterValue, allowed=("EntityMetricData", "StrictEntityValidation"))
    store.queue_samples(parse_datapoints(Namespace, MetricData, time.time()))
    keep_maintained(store)
    return {}


def get_metric_statistics(
    store: Store,
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
    refuse_unknown(unsupported, InvalidParameterValue)
    key = MetricKey(check_namespace(Namespace), check_metric_name(MetricName),
                    check_dimensions(Dimensions, "Dimensions"))  # type: ignore[arg-type]
    start_s, end_s = _time_range(StartTime, EndTime)
    if Period is None:
        raise MissingParameter("The parameter Period is required.")
    period = check_period(Period)
    statistics, extended = _statistics(Statistics, ExtendedStatistics)
    unit = check_unit(Unit, "Unit") if Unit is not None else None
    return {"Label": key.name, "Datapoints": metric_statistics(store, key, start_s, end_s, period, statistics, extended, unit)}


def metric_statistics(store: Store, key: MetricKey, start_s: float, end_s: float, period: int, statistics: list[str],
               percentiles: list[str], unit: str | None = None) -> list[dict[str, Any]]:
    """GetMetricStatistics' datapoints for a valid range and period, statistics and percentiles in
    one pass (the API takes one kind a call; ``trainmon metrics`` shows both in one table)."""
    _check_statistics(statistics)
    _check_percentiles(percentiles)
    start = aligned_start(start_s, period, time.time())
    if start is None:
        return []
    check_datapoint_count(start, end_s, period)
    found = datapoints(store, key, int(start * 1000), int(end_s * 1000), period, statistics, percentiles, unit)
    for point in found:
        point["Timestamp"] = as_datetime(point["Timestamp"])
    return found


def get_metric_data(
    store: Store,
    *,
    MetricDataQueries: list[dict[str, Any]] | None = None,
    StartTime: Any = None,
    EndTime: Any = None,
    NextToken: str | None = None,
    ScanBy: str | None = None,
    MaxDatapoints: int | None = None,
    LabelOptions: dict[str, Any] | None = None,
    **unsupported: Any,
) -> dict[str, Any]:
    """Metrics and metric math over them, paginated by datapoints (docs/metrics.md)."""
    pages, start = _pages(store, NextToken, MetricDataQueries=MetricDataQueries, StartTime=StartTime, EndTime=EndTime,
                          ScanBy=ScanBy, MaxDatapoints=MaxDatapoints, LabelOptions=LabelOptions, **unsupported)
    return pages.page(start)


def all_metric_data(store: Store, *, NextToken: str | None = None, **request: Any) -> list[dict[str, Any]]:
    """Every page of a GetMetricData answer (MaxDatapoints a page), joined into one list of results:
    the queries computed once, then paged."""
    pages, start = _pages(store, NextToken, **request)
    response = pages.page(start)
    results: list[dict[str, Any]] = response["MetricDataResults"]
    while "NextToken" in response:
        start += pages.limit
        response = pages.page(start)
        for whole, page in zip(results, response["MetricDataResults"], strict=True):
            whole["Timestamps"] += page["Timestamps"]
            whole["Values"] += page["Values"]
    return results


def _pages(
    store: Store,
    token: str | None,
    *,
    MetricDataQueries: list[dict[str, Any]] | None = None,
    StartTime: Any = None,
    EndTime: Any = None,
    ScanBy: str | None = None,
    MaxDatapoints: int | None = None,
    LabelOptions: dict[str, Any] | None = None,
    **unsupported: Any,
) -> tuple[_Pages, int]:
    """A GetMetricData request checked (its NextToken before any query is computed), its results
    computed, as pages; and where the page that ``token`` asks for starts."""
    refuse_unknown(unsupported, InvalidParameterValue)
    queries, order = metric_queries(MetricDataQueries)
    start_s, end_s = _time_range(StartTime, EndTime)
    descending = _scan_descending(ScanBy)
    limit = _max_datapoints(MaxDatapoints)
    _check_label_options(LabelOptions)
    fingerprint = _fingerprint(MetricDataQueries, start_s, end_s, descending)
    after = _cursor(token, fingerprint) if token is not None else None
    pages = _Pages(query_results(store, queries, order, start_s, end_s, time.time()), descending, limit, fingerprint)
    return pages, pages.start(after)


def list_metrics(
    store: Store,
    *,
    Namespace: str | None = None,
    MetricName: str | None = None,
    Dimensions: list[dict[str, str]] | None = None,
    NextToken: str | None = None,
    RecentlyActive: str | None = None,
    **unsupported: Any,
) -> dict[str, Any]:
    refuse_unknown(unsupported, InvalidParameterValue, allowed=("IncludeLinkedAccounts", "OwningAccount"))
    if Namespace is not None:
        check_namespace(Namespace)
    if MetricName is not None:
        check_metric_name(MetricName)
    wanted = check_dimensions(Dimensions, "Dimensions", values_required=False, limit=10)
    if RecentlyActive not in (None, "PT3H"):
        raise InvalidParameterValue("The parameter RecentlyActive must be PT3H.")
    since_ms = (time.time() - RECENT_S) * 1000 if RecentlyActive else None
    fingerprint = request_fingerprint([Namespace, MetricName, wanted, RecentlyActive])
    place = _list_place(NextToken, fingerprint) if NextToken is not None else None
    metrics: list[dict[str, Any]] = []
    more = True
    while more and len(metrics) < LIST_PAGE:  # keyset pages: each read costs the same whatever the total
        batch = store.metric_keys_after(place, LIST_PAGE, Namespace, MetricName)
        more = len(batch) == LIST_PAGE
        for key, last_ms, at in batch:
            place = at
            present = dict(key.dimensions)
            if (since_ms is None or last_ms >= since_ms) and all(
                    name in present and (value is None or present[name] == value) for name, value in wanted):
                metrics.append(key.to_api())
                if len(metrics) == LIST_PAGE:
                    more = more or at != batch[-1][2]
                    break
    result: dict[str, Any] = {"Metrics": metrics}
    if more and place is not None:
        result["NextToken"] = keyset_token(place, fingerprint)
    return result


def _list_place(token: Any, fingerprint: str) -> tuple[str, str, int]:
    """Where a ListMetrics page ended (InvalidParameterValue for a token no page of this request gave)."""
    if not isinstance(token, str):
        problems = Problems()
        String().check(token, "nextToken", problems)
        problems.raise_if_any(InvalidParameterValue)
    place = keyset_values(token, fingerprint, (str, str, int))
    if place is None:
        raise InvalidParameterValue("The parameter NextToken is not one a ListMetrics page of this request gave.")
    namespace, name, id_ = place
    return namespace, name, id_


def _statistics(statistics: list[str] | None, extended: list[str] | None) -> tuple[list[str], list[str]]:
    if statistics and extended:
        raise InvalidParameterCombination("Must specify either Statistics or ExtendedStatistics, but not both.")
    if not statistics and not extended:
        raise MissingParameter("Must specify either Statistics or ExtendedStatistics.")
    return list(dict.fromkeys(statistics or ())), list(dict.fromkeys(extended or ()))


def _check_statistics(statistics: list[str]) -> None:
    if len(statistics) > 5 or any(s not in STATISTICS for s in statistics):
        raise InvalidParameterValue(f"The parameter Statistics takes 1 to 5 of {', '.join(STATISTICS)}.")


def _check_percentiles(extended: list[str]) -> None:
    if len(extended) > 10:
        raise InvalidParameterValue("The parameter ExtendedStatistics takes 1 to 10 percentiles.")
    for stat in extended:
        percentile_of(stat)


def _time_range(start: Any, end: Any) -> tuple[float, float]:
    for field, value in (("StartTime", start), ("EndTime", end)):
        if value is None:
            raise MissingParameter(f"The parameter {field} is required.")
    start_s, end_s = epoch_seconds(start, "StartTime"), epoch_seconds(end, "EndTime")
    if end_s <= start_s:
        raise InvalidParameterValue("The parameter StartTime must be before EndTime.")
    return start_s, end_s


def _scan_descending(value: Any) -> bool:
    if value is not None and value not in SCAN_BY:
        raise InvalidParameterValue(f"The value {value} for parameter ScanBy is not one of {', '.join(SCAN_BY)}.")
    return bool(value != "TimestampAscending")


def _max_datapoints(value: Any) -> int:
    if value is None:
        return DEFAULT_MAX_DATAPOINTS
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidParameterValue("The parameter MaxDatapoints must be a positive integer.")
    return value


def _check_label_options(value: Any) -> None:
    """LabelOptions.Timezone only matters to time-based dynamic labels, which trainmon leaves as written."""
    if value is None:
        return
    options = structure(value, "LabelOptions", ("Timezone",))
    zone = options.get("Timezone")
    if zone is not None and (not isinstance(zone, str) or not _TIMEZONE.fullmatch(zone)):
        raise InvalidParameterValue(
            f"The value {zone} for parameter LabelOptions.Timezone is not valid: use + or - and four digits, e.g. +0130."
        )


# -- pagination: MaxDatapoints points a page, newest (or oldest) first across all results --------


class _Pages:
    """The datapoints of every result in page order (by time, newest first unless ascending, then
    by result), ``limit`` a page."""

    def __init__(self, results: list[tuple[str, str, Series]], descending: bool, limit: int, fingerprint: str) -> None:
        self.results = results
        self.descending = descending
        self.limit = limit
        self.fingerprint = fingerprint
        self.entries = sorted(((t, index) for index, (_, _, series) in enumerate(results) for t in series.points),
                              key=self._order)
        self.last = {index: position for position, (_, index) in enumerate(self.entries)}  # each result's last entry

    def _order(self, entry: tuple[int, int]) -> tuple[int, int]:
        timestamp, index = entry
        return (-timestamp if self.descending else timestamp, index)

    def start(self, after: tuple[int, int] | None) -> int:
        """Where the page after the entry ``after`` (a NextToken's) starts."""
        if after is None:
            return 0
        return bisect.bisect_right([self._order(entry) for entry in self.entries], self._order(after))

    def page(self, start: int) -> dict[str, Any]:
        """The response whose datapoints start at entry ``start``."""
        end = start + self.limit
        page = self.entries[start:end]
        chosen: dict[int, list[int]] = {}
        for timestamp, index in page:
            chosen.setdefault(index, []).append(timestamp)
        response: dict[str, Any] = {
            "MetricDataResults": [
                _result(query_id, label, series, chosen.get(index, []), self.last.get(index, -1) >= end)
                for index, (query_id, label, series) in enumerate(self.results)
            ],
            "Messages": [],
        }
        if end < len(self.entries):
            response["NextToken"] = _token(page[-1], self.fingerprint)
        return response


def _result(query_id: str, label: str, series: Series, timestamps: list[int], partial: bool) -> dict[str, Any]:
    return {
        "Id": query_id,
        "Label": label,
        "Timestamps": [as_datetime(t / 1000) for t in timestamps],
        "Values": [series.points[t] for t in timestamps],
        "StatusCode": "PartialData" if partial else "Complete",
        "Messages": [],
    }


def _fingerprint(queries: Any, start_s: float, end_s: float, descending: bool) -> str:
    """What a GetMetricData NextToken is bound to: a token is only good for the request that gave it."""
    return request_fingerprint([queries, start_s, end_s, descending])


def _token(last: tuple[int, int], fingerprint: str) -> str:
    raw = json.dumps({"t": last[0], "i": last[1], "r": fingerprint}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _cursor(token: Any, fingerprint: str) -> tuple[int, int]:
    """The last (timestamp, result) a previous page returned."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        if data["r"] == fingerprint and isinstance(data["t"], int) and isinstance(data["i"], int):
            return data["t"], data["i"]
    except (AttributeError, ValueError, TypeError, KeyError):
        pass
    raise CloudWatchError("The next token specified is invalid.", code="InvalidNextToken")


OPERATIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "PutMetricData": put_metric_data,
    "GetMetricStatistics": get_metric_statistics,
    "GetMetricData": get_metric_data,
    "ListMetrics": list_metrics,
}
