"""GetMetricData's MetricDataQueries checked as CloudWatch checks them, into the queries the read
layer computes (:class:`trainmon.read.metric_data.DataQuery`).

An alarm's Metrics are the same structures: PutMetricAlarm checks them here too
(``api/alarm_requests.py``), and the alarm pass computes them as GetMetricData does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..cloudwatch.expressions import Expression, Node, evaluation_order, parse
from ..cloudwatch.model import QUERY_ID, MetricKey, check_dimensions, check_metric_name, check_namespace, check_unit
from ..cloudwatch.statistics import STATISTICS, check_period, percentile_of
from ..errors import InvalidParameterCombination, InvalidParameterValue, MissingParameter
from ..read.metric_data import DataQuery, MetricStat
from ..shapes import refuse_unknown

MAX_QUERIES = 500
MAX_EXPRESSION = 2048
_QUERY_FIELDS = ("Id", "MetricStat", "Expression", "Label", "ReturnData", "Period", "AccountId")
_T = TypeVar("_T")


def metric_queries(value: Any) -> tuple[list[DataQuery], list[str]]:
    """GetMetricData's MetricDataQueries checked (an alarm's Metrics are the same structures), and
    the order that computes each expression after its inputs."""
    if value is None:
        raise MissingParameter("The parameter MetricDataQueries is required.")
    if not isinstance(value, list) or not value:
        raise InvalidParameterValue(f"The collection MetricDataQueries must have 1 to {MAX_QUERIES} members.")
    if len(value) > MAX_QUERIES:
        raise InvalidParameterValue(f"The collection MetricDataQueries must not have a size greater than {MAX_QUERIES}.")
    queries: list[DataQuery] = []
    seen: set[str] = set()
    for position, item in enumerate(value, start=1):
        query = _data_query(item, f"MetricDataQueries.member.{position}")
        if query.id in seen:
            raise InvalidParameterValue(
                f"The value {query.id} for parameter MetricDataQueries.member.{position}.Id is a duplicate: "
                "each query of a request needs its own Id."
            )
        seen.add(query.id)
        queries.append(query)
    trees = {q.id: q.expression.tree for q in queries if q.expression is not None}
    return queries, evaluation_order(trees, seen)


def _data_query(item: Any, where: str) -> DataQuery:
    fields = structure(item, where, _QUERY_FIELDS)
    query_id = _query_id(fields.get("Id"), f"{where}.Id")
    label = fields.get("Label")
    if label is not None and not isinstance(label, str):
        raise InvalidParameterValue(f"The parameter {where}.Label must be a string.")
    return_data = fields.get("ReturnData", True)
    if not isinstance(return_data, bool):
        raise InvalidParameterValue(f"The parameter {where}.ReturnData must be true or false.")
    period = _located(check_period, fields["Period"], "Period", f"{where}.Period") if "Period" in fields else None
    stat, expression = fields.get("MetricStat"), fields.get("Expression")
    if stat is not None and expression is not None:
        raise InvalidParameterCombination(
            f"The parameters {where}.MetricStat and {where}.Expression are mutually exclusive: give one of them."
        )
    if stat is not None:
        return DataQuery(query_id, label, return_data, metric=_metric_stat(stat, f"{where}.MetricStat"))
    if expression is None:
        raise MissingParameter(f"The parameter {where} needs one of MetricStat or Expression.")
    tree = _expression_tree(expression, f"{where}.Expression")
    return DataQuery(query_id, label, return_data, expression=Expression(query_id, tree, period))


def structure(value: Any, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    """``value`` when it is a structure of only ``allowed`` members (InvalidParameterValue naming ``where``)."""
    if not isinstance(value, dict):
        raise InvalidParameterValue(f"The parameter {where} must be a structure.")
    refuse_unknown(value, InvalidParameterValue, allowed=allowed, where=where)
    return value


def _query_id(value: Any, field: str) -> str:
    if value is None:
        raise MissingParameter(f"The parameter {field} is required.")
    if not isinstance(value, str) or not QUERY_ID.fullmatch(value):
        raise InvalidParameterValue(
            f"The value {value} for parameter {field} is not valid: an Id is 1 to 255 letters, digits and "
            "underscores, and starts with a lowercase letter."
        )
    return value


def _expression_tree(value: Any, field: str) -> Node:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_EXPRESSION:
        raise InvalidParameterValue(f"The parameter {field} must be a string of 1 to {MAX_EXPRESSION} characters.")
    return parse(value, field)


def _metric_stat(value: Any, where: str) -> MetricStat:
    fields = structure(value, where, ("Metric", "Period", "Stat", "Unit"))
    for name in ("Metric", "Period", "Stat"):
        if fields.get(name) is None:
            raise MissingParameter(f"The parameter {where}.{name} is required.")
    metric = structure(fields["Metric"], f"{where}.Metric", ("Namespace", "MetricName", "Dimensions"))
    key = MetricKey(
        _located(check_namespace, metric.get("Namespace"), "Namespace", f"{where}.Metric.Namespace"),
        check_metric_name(metric.get("MetricName"), f"{where}.Metric.MetricName"),
        check_dimensions(metric.get("Dimensions"), f"{where}.Metric.Dimensions"),  # type: ignore[arg-type]
    )
    period = _located(check_period, fields["Period"], "Period", f"{where}.Period")
    unit = check_unit(fields["Unit"], f"{where}.Unit") if fields.get("Unit") is not None else None
    return MetricStat(key, period, check_stat(fields["Stat"], f"{where}.Stat"), unit)


def check_stat(value: Any, field: str) -> str:
    """A statistic or a percentile (MetricStat.Stat, ``trainmon metrics --statistic``)."""
    if isinstance(value, str) and value in STATISTICS:
        return value
    if isinstance(value, str) and value.startswith("p"):
        try:
            percentile_of(value)
            return value
        except InvalidParameterValue:
            pass
    raise InvalidParameterValue(
        f"The value {value} for parameter {field} is not a valid statistic: use SampleCount, Average, Sum, "
        "Minimum, Maximum or a percentile from p0.0 to p100 (e.g. p99.9)."
    )


def _located(check: Callable[[Any], _T], value: Any, name: str, field: str) -> _T:
    """``check(value)``, its error naming the parameter by its full path in the request."""
    try:
        return check(value)
    except (InvalidParameterValue, MissingParameter) as error:
        raise type(error)(error.message.replace(f"parameter {name} ", f"parameter {field} ")) from None
