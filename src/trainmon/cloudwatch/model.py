"""CloudWatch's metric model: a metric is namespace + name + the exact set of dimensions.

This module validates requests as CloudWatch does (limits, ranges, codes) and turns
PutMetricData items into :class:`~trainmon.cloudwatch.statistics.Sample` rows (pure).

A number is a real number of any type, as boto3 takes one (a ``float`` or ``int``, or a
``decimal.Decimal``) and as a script has them at hand: subclasses of ``int`` and ``float``,
numpy's integer and floating scalars, ``fractions.Fraction`` (:func:`is_number`). A ``bool`` is
not one, nor numpy's.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from ..errors import InvalidParameterCombination, InvalidParameterValue, MissingParameter
from .statistics import Sample, single

UNITS = frozenset({
    "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes", "Terabytes", "Bits",
    "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count", "Bytes/Second", "Kilobytes/Second",
    "Megabytes/Second", "Gigabytes/Second", "Terabytes/Second", "Bits/Second", "Kilobits/Second", "Megabits/Second",
    "Gigabits/Second", "Terabits/Second", "Count/Second", "None",
})
MAX_METRICS_PER_PUT = 1000
MAX_DIMENSIONS = 30
MAX_VALUES = 150
VALUE_LIMIT = 2.0**360
PAST_LIMIT_S = 14 * 86_400
FUTURE_LIMIT_S = 2 * 3600
JOB_NAMESPACE = "/aws/sagemaker/TrainingJobs"
QUERY_ID = re.compile(r"[a-z][A-Za-z0-9_]{0,254}")  # CloudWatch's rule for a GetMetricData query Id


@dataclass(frozen=True, slots=True)
class MetricKey:
    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...]  # sorted by name: the exact set identifies the metric

    @property
    def dimensions_json(self) -> str:
        return json.dumps(self.dimensions, separators=(",", ":"))

    def to_api(self) -> dict[str, Any]:
        return {"Namespace": self.namespace, "MetricName": self.name,
                "Dimensions": [{"Name": n, "Value": v} for n, v in self.dimensions]}

    @classmethod
    def from_row(cls, namespace: str, name: str, dimensions_json: str) -> MetricKey:
        return cls(namespace, name, tuple((n, v) for n, v in json.loads(dimensions_json)))


def job_metric_key(job_name: str, metric_name: str) -> MetricKey:
    """Where SageMaker publishes a job's metric from its logs: dimension TrainingJobName."""
    return MetricKey(JOB_NAMESPACE, metric_name, (("TrainingJobName", job_name),))


_NUMBER_TYPES: dict[type, bool] = {float: True, int: True, bool: False}  # each type met, once judged


def is_number_type(kind: type) -> bool:
    """Whether values of ``kind`` are numbers: any ``numbers.Real`` (int, float, their subclasses,
    numpy's integer and floating scalars, Fraction) or a Decimal; not bool."""
    known = _NUMBER_TYPES.get(kind)
    if known is None:
        known = _NUMBER_TYPES[kind] = issubclass(kind, (numbers.Real, Decimal)) and not issubclass(kind, bool)
    return known


def is_number(value: Any) -> bool:
    return is_number_type(type(value))


def as_float(value: Any) -> float:
    """A number (:func:`is_number`) as a float; a Decimal's signalling NaN as NaN. OverflowError
    for a finite number beyond a float's range (an int, a Fraction, a Decimal, numpy's longdouble),
    which would otherwise pass for an infinity."""
    try:
        number = float(value)
    except ValueError:  # Decimal("sNaN") has no float, but is a NaN
        return math.nan
    if math.isinf(number) and abs(value) != math.inf:
        raise OverflowError(f"{value} is beyond a float's range")
    return number


def epoch_seconds(value: Any, field: str) -> float:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    if is_number(value):
        try:
            return as_float(value)
        except OverflowError:  # beyond any time: as an infinity is
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        try:
            return epoch_seconds(datetime.fromisoformat(value.replace("Z", "+00:00")), field)
        except ValueError:
            pass
    raise InvalidParameterValue(f"The parameter {field} must be a timestamp (a datetime, ISO 8601 text or epoch seconds).")


def check_namespace(namespace: Any, *, for_put: bool = False) -> str:
    if namespace is None:
        raise MissingParameter("The parameter Namespace is required.")
    if not isinstance(namespace, str) or not 1 <= len(namespace) <= 255 or namespace.startswith(":"):
        raise InvalidParameterValue("The parameter Namespace must be 1 to 255 characters and not start with ':'.")
    if for_put and namespace.startswith("AWS/"):
        raise InvalidParameterValue(f"The value {namespace} for parameter Namespace is invalid: 'AWS/' is reserved.")
    return namespace


def check_metric_name(name: Any, field: str = "MetricName") -> str:
    if name is None:
        raise MissingParameter(f"The parameter {field} is required.")
    if not isinstance(name, str) or not 1 <= len(name) <= 255:
        raise InvalidParameterValue(f"The parameter {field} must be 1 to 255 characters.")
    return name


def check_dimensions(dimensions: Any, field: str, *, values_required: bool = True,
                     limit: int = MAX_DIMENSIONS) -> tuple[tuple[str, str | None], ...]:
    if dimensions is None:
        return ()
    if not isinstance(dimensions, list) or len(dimensions) > limit:
        raise InvalidParameterValue(f"The collection {field} must not have more than {limit} members.")
    pairs: dict[str, str | None] = {}
    for position, dimension in enumerate(dimensions, start=1):
        where = f"{field}.member.{position}"
        name = dimension.get("Name") if isinstance(dimension, dict) else None
        value = dimension.get("Value") if isinstance(dimension, dict) else None
        if name is None:
            raise MissingParameter(f"The parameter {where}.Name is required.")
        if not isinstance(name, str) or not 1 <= len(name) <= 255 or name.startswith(":") or not _clean(name):
            raise InvalidParameterValue(f"The parameter {where}.Name must be 1 to 255 printable ASCII characters, not starting with ':'.")
        if value is None and values_required:
            raise MissingParameter(f"The parameter {where}.Value is required.")
        if value is not None and (not isinstance(value, str) or not 1 <= len(value) <= 1024 or not _clean(value)):
            raise InvalidParameterValue(f"The parameter {where}.Value must be 1 to 1024 printable ASCII characters.")
        if name in pairs:
            raise InvalidParameterValue(f"The parameter {field} holds the dimension name {name!r} twice.")
        pairs[name] = value
    return tuple(sorted(pairs.items()))


def _clean(text: str) -> bool:
    """Printable ASCII only (space to tilde)."""
    return text.isascii() and text.isprintable()


def check_unit(unit: Any, field: str) -> str:
    if unit is None:
        return "None"
    if not isinstance(unit, str) or unit not in UNITS:
        raise InvalidParameterValue(f"The value {unit} for parameter {field} is not a valid unit.")
    return str(unit)


def _value(value: Any, field: str) -> float:
    if not is_number(value):
        raise InvalidParameterValue(f"The parameter {field} must be a number.")
    try:
        number = as_float(value)
    except OverflowError:  # a finite number beyond any double (so beyond 2^360)
        raise InvalidParameterValue(f"The value for parameter {field} is out of range: values must be within "
                                    "-2^360 to 2^360.") from None
    if math.isnan(number) or math.isinf(number):
        raise InvalidParameterValue(f"The value {number} for parameter {field} is invalid: NaN and infinities are not accepted.")
    if abs(number) > VALUE_LIMIT:
        raise InvalidParameterValue(f"The value {number} for parameter {field} is out of range: values must be within -2^360 to 2^360.")
    return number


def parse_put(namespace: Any, metric_data: Any, now_s: float) -> list[tuple[MetricKey, int, list[Sample]]]:
    """Validate a whole PutMetricData request: (metric, storage resolution, samples) per metric
    and resolution, the items of one metric together (a call of 1,000 items is often a few
    metrics' datapoints).

    Everything is checked before anything is written, so a refused call writes nothing. A
    dimension list seen before in the call is not checked again.
    """
    namespace = check_namespace(namespace, for_put=True)
    if metric_data is None:
        raise MissingParameter("The parameter MetricData is required.")
    if not isinstance(metric_data, list) or not 1 <= len(metric_data) <= MAX_METRICS_PER_PUT:
        raise InvalidParameterValue(f"The collection MetricData must have 1 to {MAX_METRICS_PER_PUT} members.")
    groups: dict[tuple[Any, ...], list[Sample]] = {}  # (name, dimensions, resolution) -> samples
    checked: dict[tuple[Any, ...], tuple[tuple[str, str], ...]] = {}
    names: set[Any] = set()
    oldest, newest = now_s - PAST_LIMIT_S, now_s + FUTURE_LIMIT_S
    for position, item in enumerate(metric_data, start=1):
        if not isinstance(item, dict):
            raise InvalidParameterValue(f"The parameter MetricData.member.{position} must be a structure.")
        name = item.get("MetricName")
        if type(name) is not str or name not in names:
            name = check_metric_name(name, f"MetricData.member.{position}.MetricName")
            names.add(name)
        dimensions = _dimensions(item.get("Dimensions"), position, checked)
        unit = item.get("Unit", "None")
        if type(unit) is not str or unit not in UNITS:
            unit = check_unit(unit, f"MetricData.member.{position}.Unit")
        resolution = item.get("StorageResolution", 60)
        if resolution not in (1, 60) or isinstance(resolution, bool):
            raise InvalidParameterValue(f"The parameter MetricData.member.{position}.StorageResolution must be a "
                                        "value in the set [ 1, 60 ].")
        resolution = 1 if resolution == 1 else 60  # (given as 1.0 or numpy.int64(1): stored as 1)
        given = item.get("Timestamp")
        try:
            stamp = now_s if given is None else (float(given) if type(given) in (int, float) else epoch_seconds(
                given, f"MetricData.member.{position}.Timestamp"))
        except OverflowError:  # a number beyond any double: out of range below
            stamp = math.inf if given is not None and given > 0 else -math.inf
        if not oldest <= stamp <= newest:
            raise InvalidParameterValue(
                f"The parameter MetricData.member.{position}.Timestamp must specify a time no more than two weeks "
                "in the past and no more than two hours in the future."
            )
        stamp_ms = int(round(stamp * 1000)) if resolution == 1 else math.floor(stamp / 60) * 60_000
        value = item.get("Value")
        if value is not None and type(value) in (int, float) and "StatisticValues" not in item \
                and "Values" not in item and "Counts" not in item and -VALUE_LIMIT <= value <= VALUE_LIMIT:
            samples = [Sample(stamp_ms, 1.0, float(value), float(value), float(value), float(value), unit)]
        else:
            samples = _item_samples(item, f"MetricData.member.{position}", stamp_ms, unit)
        group = groups.get((name, dimensions, resolution))
        if group is None:
            groups[(name, dimensions, resolution)] = samples
        else:
            group.extend(samples)
    return [(MetricKey(namespace, name, dimensions), resolution, samples)
            for (name, dimensions, resolution), samples in groups.items()]


def _dimensions(given: Any, position: int, checked: dict[tuple[Any, ...], tuple[tuple[str, str], ...]]
                ) -> tuple[tuple[str, str], ...]:
    """An item's dimensions, checked, as sorted pairs; a list seen before in the call comes from ``checked``."""
    if given is None:
        return ()
    seen: tuple[Any, ...] | None
    hit: tuple[tuple[str, str], ...] | None
    try:
        seen = tuple((d["Name"], d["Value"]) for d in given)
        hit = checked.get(seen)
    except (TypeError, KeyError):  # not a list of structures, or a value that is not text: checked below
        seen = hit = None
    if hit is not None:
        return hit
    pairs = check_dimensions(given, f"MetricData.member.{position}.Dimensions")
    if seen is not None:
        checked[seen] = pairs  # type: ignore[assignment]
    return pairs  # type: ignore[return-value]


def _item_samples(item: dict[str, Any], where: str, stamp_ms: int, unit: str) -> list[Sample]:
    """The samples of an item in any of its forms (a value, a statistic set, values and counts)."""
    forms = [k for k in ("Value", "StatisticValues", "Values") if item.get(k) is not None]
    if len(forms) > 1:
        raise InvalidParameterCombination(f"The parameters {where}.{' and '.join(forms)} are mutually exclusive.")
    if item.get("Counts") is not None and item.get("Values") is None:
        raise InvalidParameterCombination(f"The parameter {where}.Counts needs {where}.Values.")
    return _samples(item, forms[0] if forms else None, where, stamp_ms, unit)


def _samples(item: dict[str, Any], form: str | None, where: str, stamp_ms: int, unit: str) -> list[Sample]:
    if form is None:
        raise MissingParameter(f"The parameter {where} needs one of Value, StatisticValues or Values.")
    if form == "Value":
        value = _value(item["Value"], f"{where}.Value")
        return [single(stamp_ms, value, unit)]
    if form == "StatisticValues":
        stats = item["StatisticValues"]
        for key in ("SampleCount", "Sum", "Minimum", "Maximum"):
            if not isinstance(stats, dict) or stats.get(key) is None:
                raise MissingParameter(f"The parameter {where}.StatisticValues.{key} is required.")
        count = _value(stats["SampleCount"], f"{where}.StatisticValues.SampleCount")
        total = _value(stats["Sum"], f"{where}.StatisticValues.Sum")
        low = _value(stats["Minimum"], f"{where}.StatisticValues.Minimum")
        high = _value(stats["Maximum"], f"{where}.StatisticValues.Maximum")
        if count <= 0:
            raise InvalidParameterValue(f"The parameter {where}.StatisticValues.SampleCount must be greater than 0.")
        if low > high:
            raise InvalidParameterValue(f"The parameter {where}.StatisticValues.Minimum must not exceed Maximum.")
        known = low if count == 1 or low == high else None
        return [Sample(stamp_ms, count, total, low, high, known, unit)]
    values = item["Values"]
    counts = item.get("Counts")
    if not isinstance(values, list) or not values:
        raise InvalidParameterValue(f"The parameter {where}.Values must be a non-empty list.")
    try:
        distinct = len(set(values))
    except TypeError:  # a member that cannot be hashed (a list, Decimal("sNaN")): no number, refused below
        distinct = 0
    if distinct > MAX_VALUES:
        raise InvalidParameterValue(f"The parameter {where}.Values holds more than {MAX_VALUES} unique values.")
    if counts is not None and (not isinstance(counts, list) or len(counts) != len(values)):
        raise InvalidParameterValue(f"The parameters {where}.Values and {where}.Counts must have the same length.")
    samples = []
    for index, raw in enumerate(values):
        value = _value(raw, f"{where}.Values.member.{index + 1}")
        count = 1.0 if counts is None else _value(counts[index], f"{where}.Counts.member.{index + 1}")
        if count < 0:
            raise InvalidParameterValue(f"The parameter {where}.Counts.member.{index + 1} must not be negative.")
        if count:
            samples.append(single(stamp_ms, value, unit, count))
    return samples
