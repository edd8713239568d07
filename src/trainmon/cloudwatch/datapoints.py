"""A PutMetricData call as columns: every item validated in a few passes over the call (pure).

:func:`~trainmon.cloudwatch.model.parse_put` checks a call item by item and makes a
:class:`~trainmon.cloudwatch.statistics.Sample` of each datapoint: a few microseconds an item,
more than storing it costs once writes are coalesced. :func:`parse_datapoints` reads each field
of every item in one pass (``map`` over the items: no Python frame per item), checks each
distinct name, dimension list, unit and resolution once and the timestamps and values as arrays,
and gives :class:`Datapoints`: columns, and a code per datapoint naming its metric. A metric's
label (name, dimensions as given, resolution, unit) maps to its checked metric in a table kept
between calls (at most 10,000 labels), so the series a script puts again and again are checked
once, and every call gives the same object for a metric (whose datapoints the store's writer
then tells together by identity, without hashing its key).

Numbers of any type (:func:`~trainmon.cloudwatch.model.is_number`: numpy's scalars, Decimal,
subclasses of int) take that path too: a column is judged by the types it holds (mostly one),
and read by numpy at once when those are ``float``, ``int`` or ``numpy.float64``, else converted
with ``float`` in one ``map``, as ``parse_put`` converts each.

Only calls whose items are all single values (``Value``) take that path. Anything else, and
anything it does not accept at once (a field missing, of another type, out of range), goes to
``parse_put``, which accepts the same calls and words each refusal as CloudWatch does, naming
the first item at fault. So the rules live in one place, and this path only ever accepts what
``parse_put`` accepts, with the same datapoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import partial
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np

from .model import (
    FUTURE_LIMIT_S,
    MAX_DIMENSIONS,
    PAST_LIMIT_S,
    UNITS,
    VALUE_LIMIT,
    MetricKey,
    check_namespace,
    epoch_seconds,
    is_number_type,
    parse_put,
)
from .statistics import Sample

Metric = tuple[MetricKey, int, str]  # (metric, storage resolution, unit): what a chunk is written for
_PLAIN_FIELDS = frozenset({"MetricName", "Dimensions", "Timestamp", "Value", "Unit", "StorageResolution"})
_NUMPY_READS = frozenset({float, int, np.float64})  # a column of these is read by np.array itself
_STAMP_TYPES = frozenset({datetime, type(None)})  # the other timestamps a column of them may hold
_NO_DIMENSIONS: list[Any] = []
_pairs = partial(map, itemgetter("Name", "Value"))  # a dimension list's (name, value) pairs, in C
_first, _name, _value = itemgetter(0), itemgetter("Name"), itemgetter("Value")
_KEPT_METRICS = 10_000
_METRICS: dict[tuple[Any, ...], Metric] = {}  # (namespace, resolution, unit; a call's label) -> its metric, checked
_CANONICAL: dict[Metric, Metric] = {}  # one object per metric: calls' metrics are told together by identity


@dataclass(frozen=True, slots=True)
class Datapoints:
    """A validated PutMetricData call: a row per datapoint, in the call's order."""

    metrics: list[Metric]  # by code
    codes: np.ndarray  # int64: each datapoint's metric, an index into ``metrics``
    timestamp_ms: np.ndarray  # int64
    value: np.ndarray  # float64: the value each of ``count`` samples had; NaN for a statistic set's
    stats: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None  # count, sum, minimum, maximum (float64);
    # None when every datapoint is a single value (count 1, sum = minimum = maximum = value)

    def __len__(self) -> int:
        return len(self.codes)

    def columns(self) -> list[np.ndarray]:
        """timestamp_ms, value, count, sum, minimum, maximum: a datapoint chunk's columns (store.series)."""
        if self.stats is None:
            return [self.timestamp_ms, self.value, np.ones(len(self.value)), self.value, self.value, self.value]
        return [self.timestamp_ms, self.value, *self.stats]


def parse_datapoints(namespace: Any, metric_data: Any, now_s: float) -> Datapoints:
    """Validate a whole PutMetricData request (CloudWatch's rules and words: ``parse_put``'s) and
    give its datapoints as columns. Nothing is accepted that ``parse_put`` would refuse."""
    checked = check_namespace(namespace, for_put=True)
    try:
        found = _plain(checked, metric_data, now_s)
    except Exception:  # anything odd in the call: parse_put finds it and says what, or accepts it
        found = None
    return found if found is not None else _from_samples(parse_put(checked, metric_data, now_s))


def _plain(namespace: str, data: Any, now_s: float) -> Datapoints | None:
    """The datapoints of a call of single values, or None when anything needs ``parse_put``'s
    item-by-item look (which then refuses or accepts the call)."""
    if type(data) is not list or not 1 <= len(data) <= 1000 or not set().union(*data) <= _PLAIN_FIELDS:
        return None
    get = dict.get
    values = list(map(get, data, repeat("Value")))
    units = list(map(get, data, repeat("Unit"), repeat("None")))
    resolutions = list(map(get, data, repeat("StorageResolution"), repeat(60)))
    if not (set(map(type, resolutions)) <= {int} and set(resolutions) <= {1, 60} and set(units) <= UNITS):
        return None
    value = _numbers(values)
    if value is None or not bool(np.abs(value).max() <= VALUE_LIMIT):  # NaN and infinities fail this too
        return None
    stamps = _stamps_s(list(map(get, data, repeat("Timestamp"))), now_s)
    if stamps is None or not (now_s - PAST_LIMIT_S <= stamps.min() and stamps.max() <= now_s + FUTURE_LIMIT_S):
        return None
    columns = _dimension_columns(list(map(get, data, repeat("Dimensions"), repeat(_NO_DIMENSIONS))))
    if columns is None:
        return None
    uniform = len(set(resolutions)) == 1 and len(set(units)) == 1  # the common call: shorter labels hash faster
    names = list(map(get, data, repeat("MetricName")))
    labels = list(zip(names, *columns, strict=True) if uniform
                  else zip(names, *columns, resolutions, units, strict=True))
    numbers = dict.fromkeys(labels, 0)
    width = len(columns)
    shared = (namespace, resolutions[0], units[0]) if uniform else (namespace, None, None)
    metrics: dict[int, tuple[int, Metric]] = {}  # by id: two labels may name one metric (dimensions reordered)
    for label in numbers:
        metric = _METRICS.get((shared, label))
        if metric is None:
            metric = _metric(shared, label, width)
            if metric is None:
                return None
        numbers[label] = metrics.setdefault(id(metric), (len(metrics), metric))[0]
    codes = np.fromiter(map(numbers.__getitem__, labels), np.int64, len(labels))
    return Datapoints([metric for _, metric in metrics.values()], codes, _stamps_ms(stamps, resolutions), value, None)


def _dimension_columns(dimensions: list[Any]) -> list[list[Any]] | None:
    """Each item's dimensions as label columns: none when no item has any, a name and a value
    column when every item has one (the common call: a host, a run), else one column of tuples of
    (name, value) pairs; None unless each is a list of structures."""
    if set(map(type, dimensions)) != {list}:
        return None
    lengths = set(map(len, dimensions))
    if lengths == {0}:
        return []
    if lengths == {1}:
        firsts = list(map(_first, dimensions))
        if set(map(type, firsts)) != {dict}:
            return None
        return [list(map(_name, firsts)), list(map(_value, firsts))]
    if not set(map(type, chain.from_iterable(dimensions))) <= {dict}:
        return None
    return [list(map(tuple, map(_pairs, dimensions)))]


def _metric(shared: tuple[str, Any, Any], label: tuple[Any, ...], width: int) -> Metric | None:
    """The metric a label names (name, dimension columns, and resolution and unit unless the call
    shares them), checked and kept for the next calls; None unless ``parse_put`` would take it."""
    namespace, resolution, unit = shared
    name, dimensions = label[0], label[1:1 + width]
    pairs = _checked_pairs((dimensions,) if width == 2 else dimensions[0] if width == 1 else ())
    if pairs is None or not (type(name) is str and 1 <= len(name) <= 255):
        return None
    if resolution is None:
        resolution, unit = label[-2:]
    if len(_METRICS) >= _KEPT_METRICS:
        _METRICS.clear()
    found = _METRICS[(shared, label)] = _canonical((MetricKey(namespace, name, pairs), resolution, unit))
    return found


def _canonical(metric: Metric) -> Metric:
    """The one object of this process for ``metric`` (while kept), so that its datapoints from
    several calls are told together by identity (store.series.writes.prepare_datapoints)."""
    if len(_CANONICAL) >= _KEPT_METRICS:
        _CANONICAL.clear()
    return _CANONICAL.setdefault(metric, metric)


def _numbers(given: list[Any]) -> np.ndarray | None:
    """A column of numbers of any type as float64 (each as ``float`` makes it, as parse_put does);
    None unless each is a number."""
    kinds = set(map(type, given))
    if kinds <= _NUMPY_READS:
        return np.array(given, np.float64)
    if not all(map(is_number_type, kinds)):
        return None
    return np.fromiter(map(float, given), np.float64, len(given))  # (a Decimal's sNaN raises: parse_put's)


def _stamps_s(given: list[Any], now_s: float) -> np.ndarray | None:
    """Timestamps in epoch seconds (numbers as they are, datetimes converted, none: now); None for
    anything else (text: parse_put reads it, or says what is wrong with it)."""
    numbers = _numbers(given)
    if numbers is not None:
        return numbers
    if not all(kind in _STAMP_TYPES or is_number_type(kind) for kind in set(map(type, given))):
        return None  # text, or anything else: parse_put's epoch_seconds says what it makes of it
    return np.array([now_s if stamp is None else epoch_seconds(stamp, "") for stamp in given], np.float64)


def _stamps_ms(stamps_s: np.ndarray, resolutions: list[int]) -> np.ndarray:
    """Milliseconds as parse_put rounds them: to the millisecond at resolution 1 (half to even, as
    ``round``), down to the minute at 60."""
    fine: np.ndarray = np.rint(stamps_s * 1000).astype(np.int64)
    if resolutions.count(1) == len(resolutions):
        return fine
    minutes: np.ndarray = np.floor(stamps_s / 60).astype(np.int64) * 60_000
    if resolutions.count(60) == len(resolutions):
        return minutes
    return np.asarray(np.where(np.array(resolutions) == 1, fine, minutes), np.int64)


def _checked_pairs(given: tuple[Any, ...]) -> tuple[tuple[str, str], ...] | None:
    """A dimension list's (name, value) pairs sorted by name, or None unless check_dimensions
    would take them as they are."""
    if len(given) > MAX_DIMENSIONS or len({name for name, _ in given}) != len(given):
        return None
    for name, value in given:
        if not (type(name) is str and 1 <= len(name) <= 255 and not name.startswith(":") and _clean(name)
                and type(value) is str and 1 <= len(value) <= 1024 and _clean(value)):
            return None
    return tuple(sorted(given))


def _clean(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _from_samples(items: list[tuple[MetricKey, int, list[Sample]]]) -> Datapoints:
    """``parse_put``'s groups of samples as columns."""
    metrics: dict[Metric, int] = {}
    codes: list[int] = []
    rows: list[Sample] = []
    for key, resolution, samples in items:
        for sample in samples:
            codes.append(metrics.setdefault((key, resolution, sample.unit), len(metrics)))
        rows.extend(samples)
    return Datapoints(
        [_canonical(metric) for metric in metrics], np.array(codes, np.int64), np.array([s.timestamp_ms for s in rows], np.int64),
        np.array([np.nan if s.value is None else s.value for s in rows], np.float64),
        (np.array([s.count for s in rows], np.float64), np.array([s.sum for s in rows], np.float64),
         np.array([s.minimum for s in rows], np.float64), np.array([s.maximum for s in rows], np.float64)),
    )
