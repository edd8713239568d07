"""Chunks, roll-up tiers, retention and maintenance: the encoders alone, then each backend.

Statistics are checked against numpy on the raw data; percentiles read from roll-ups against the
true value of their rank, within the sketch's relative accuracy; the sketch itself against the
ddsketch library it follows.
"""

from __future__ import annotations

import logging
import math
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from ddsketch import DDSketch

from trainmon.clock import ManualClock
from trainmon.cloudwatch import sketch
from trainmon.cloudwatch.model import MetricKey
from trainmon.cloudwatch.retention import CLOUDWATCH, parse
from trainmon.cloudwatch.sketch import MAPPING, RELATIVE_ACCURACY, ZERO_KEY, Rollups, concat, join, keys
from trainmon.cloudwatch.statistics import STATISTICS, Sample
from trainmon.errors import ValidationException
from trainmon.runtime.watch.maintenance import SEAL_BUSY_EVERY_S, Maintainer
from trainmon.sdk.clients import CloudWatchClient
from trainmon.store import Batch, Store
from trainmon.store.codec import pack, seal, unpack
from trainmon.store.rows import Maintenance
from trainmon.store.series import upkeep
from trainmon.store.sql import Sql

from .conftest import StoreTarget, wait_for

KEY = MetricKey("App", "Latency", (("Service", "api"),))
DIMENSIONS = [{"Name": "Service", "Value": "api"}]


# -- encoders and sketch, alone --------------------------------------------------------------


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype:
        return False
    return bool(np.array_equal(a.view(np.int64), b.view(np.int64))) if a.dtype == np.float64 else bool(
        np.array_equal(a, b))


@pytest.mark.parametrize("seed", range(5))
def test_packed_and_sealed_chunks_give_back_every_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 5000))
    stamps = (1_700_000_000_000 + np.cumsum(rng.integers(0, 2000, n))).astype(np.int64)
    decimals = np.round(rng.normal(1, 0.3, n), int(rng.integers(0, 7)))
    decimals[::50] = -0.0  # a log's "-0.0000"
    doubles = rng.normal(0, 1e10, n)
    special = rng.choice(np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 5e-324, 1.7976931348623157e308]), n)
    seqs = np.cumsum(rng.integers(0, 100_000, n)).astype(np.int64)
    columns = [stamps, decimals, doubles, special, decimals.copy(), seqs, -seqs]
    for encode in (pack, seal):
        back = unpack(encode(columns))
        assert len(back) == len(columns) and all(_same(a, b) for a, b in zip(columns, back, strict=True))


def test_sealed_decimal_points_take_under_four_bytes() -> None:
    rng = np.random.default_rng(1)
    n = 8192
    stamps = (1_700_000_000_000 + np.cumsum(rng.integers(900, 1100, n))).astype(np.int64)
    loss = np.array([float(f"{v:.4f}") for v in 2 * np.exp(-np.arange(n) / 3000) + rng.normal(0, 0.02, n)])
    seqs = np.cumsum(rng.integers(1, 5, n)).astype(np.int64)
    assert len(seal([stamps, loss, seqs])) / n <= 4
    assert len(pack([stamps, loss, seqs])) / n == pytest.approx(24, abs=0.1)


def test_sketch_keys_and_percentiles_are_the_ddsketch_librarys() -> None:
    rng = np.random.default_rng(2)
    values = np.concatenate([rng.lognormal(0, 6, 20_000), [0.0, 1e-320, 1.0, 3.0, 1e300]])
    expected = [MAPPING.key(v) if v > MAPPING.min_possible else ZERO_KEY for v in values]
    assert keys(values).tolist() == expected
    stamps = np.sort(rng.integers(0, 3_600_000, 3000)).astype(np.int64)
    data = np.round(rng.lognormal(0, 1, 3000), 3)
    ones = np.ones(len(data))
    minute = Rollups.from_samples(stamps, ones, data, data, data, data).roll(0, 60_000)
    hour_from_minutes = minute.roll(0, 3_600_000)
    for q in (0.0, 0.25, 0.5, 0.99, 1.0):
        library = DDSketch(RELATIVE_ACCURACY)
        for value in data:
            library.add(value)
        assert hour_from_minutes.quantiles(q)[0] == pytest.approx(library.get_quantile_value(q), rel=1e-12)
        true = np.sort(data)[math.floor(q * (len(data) - 1))]
        assert abs(hour_from_minutes.quantiles(q)[0] - true) <= RELATIVE_ACCURACY * true
    stored = Rollups.from_stored(minute.timestamp_ms, minute.count, minute.sum, minute.minimum, minute.maximum,
                                 minute.sketches())
    assert np.array_equal(stored.quantiles(0.9), minute.quantiles(0.9))


def test_fractional_counts_keep_each_rows_percentiles_in_its_own_bins() -> None:
    rng = np.random.default_rng(0)
    stamps = np.sort(rng.integers(0, 10, 500)) * 60_000
    counts = rng.choice([0.1, 0.2, 0.3, 0.7, 1.1], 500)  # running sums of these round differently
    values = rng.uniform(1, 1000, 500).round(2)
    minutes = Rollups.from_samples(stamps, counts, values * counts, values, values, values).roll(0, 60_000)
    assert np.all(np.abs(minutes.quantiles(0.0) - minutes.minimum) <= RELATIVE_ACCURACY * minutes.minimum)


def _width(values: np.ndarray) -> int:
    high = int(values.max()) if len(values) else 0
    return 0 if high < 2**8 else 1 if high < 2**16 else 2


def encode_sketch(bin_keys: np.ndarray, counts: np.ndarray) -> bytes:
    """One sketch, written one bin at a time as sketch.py's comment above _HEADER describes the form:
    the reference Rollups.sketches (all rows at once, vectorized) must match byte for byte."""
    uints = (np.uint8, np.uint16, np.uint32)
    zero = bool(len(bin_keys)) and int(bin_keys[0]) == ZERO_KEY
    others = bin_keys[1:] if zero else bin_keys
    first = int(others[0]) if len(others) else 0
    steps = np.diff(others)
    key_code, key_bytes = _width(steps), steps.astype(uints[_width(steps)]).tobytes()
    if len(others) and (int(others[-1]) - first + 8) // 8 < len(key_bytes):
        bits = np.zeros(int(others[-1]) - first + 1, np.uint8)
        bits[others - first] = 1
        key_code, key_bytes = sketch._BITMAP, np.packbits(bits, bitorder="little").tobytes()
    zero_code, zero_bytes = 0, b""
    if zero:
        whole = counts[0] == np.floor(counts[0]) and counts[0] < 2**32
        zero_code = _width(counts[:1].astype(np.int64)) if whole else 3
        zero_bytes = counts[:1].astype(uints[zero_code] if zero_code < 3 else np.float64).tobytes()
        counts = counts[1:]
    whole = bool(np.all(counts == np.floor(counts))) and (not len(counts) or counts.max() < 2**32)
    if whole and (not len(counts) or counts.max() < 16):
        halves = np.zeros(len(counts) + len(counts) % 2, np.uint8)
        halves[:len(counts)] = counts
        count_code, count_bytes = sketch._NIBBLES, (halves[0::2] | halves[1::2] << 4).tobytes()
    elif whole:
        count_code = _width(counts.astype(np.int64))
        count_bytes = counts.astype(uints[count_code]).tobytes()
    else:
        count_code, count_bytes = 3, counts.astype(np.float64).tobytes()
    return (struct.pack("<IiBB", len(bin_keys), first, key_code | (sketch._ZERO if zero else 0),
                        count_code | zero_code << 4) + key_bytes + zero_bytes + count_bytes)


def _random_rollups(rng: np.random.Generator, rows: int) -> Rollups:
    """A minute's roll-ups of random datapoints: wide and narrow values, zeros, negative ones (rows
    without percentiles), fractional and large counts (counts stored in each width)."""
    stamps = np.sort(rng.integers(0, 30 * 60_000, rows)).astype(np.int64)
    values = rng.choice([np.round(rng.lognormal(0, 4, rows), 3), rng.choice([0.0, 1e-300, 5.0, 1e300], rows),
                         rng.uniform(-0.1, 5, rows), rng.integers(0, 3, rows).astype(float)])
    counts = rng.choice([np.ones(rows), rng.choice([0.5, 1.0, 300.0, 70_000.0, 5e9], rows)])
    return Rollups.from_samples(stamps, counts, values, values, values, values).roll(0, 60_000)


def _bins(rollups: Rollups, row: int) -> tuple[list[int], list[float]]:
    mine = rollups.bin_row == row
    return rollups.bin_key[mine].tolist(), rollups.bin_count[mine].tolist()


@pytest.mark.parametrize("seed", range(30))
def test_sketches_of_many_rows_are_each_rows_own_encoding_and_read_back(seed: int) -> None:
    rollups = _random_rollups(np.random.default_rng(seed), 400)
    stored = rollups.sketches()
    assert stored == [encode_sketch(*(np.array(part) for part in _bins(rollups, row)))
                      if rollups.sketched[row] else None for row in range(len(rollups))]
    back = Rollups.from_stored(rollups.timestamp_ms, rollups.count, rollups.sum, rollups.minimum, rollups.maximum,
                               stored)
    for name in ("sketched", "bin_row", "bin_key", "bin_count"):
        assert getattr(back, name).tolist() == getattr(rollups, name).tolist(), name


def _as_first_stored(bin_keys: np.ndarray, counts: np.ndarray) -> bytes:
    """A sketch as trainmon stored them before zero's flag, bitmaps and half bytes: the same
    header, every key (zero's too) as a step from the one before, counts of a byte at least."""
    steps = np.diff(bin_keys)
    high = int(steps.max()) if len(steps) else 0
    step_width = 0 if high < 2**8 else 1 if high < 2**16 else 2
    whole = len(counts) and bool(np.all(counts == np.floor(counts))) and counts.max() < 2**32
    high = int(counts.max()) if whole else 0
    count_width = (0 if high < 2**8 else 1 if high < 2**16 else 2) if whole else 3
    types = (np.uint8, np.uint16, np.uint32, np.float64)
    return (struct.pack("<IiBB", len(bin_keys), int(bin_keys[0]) if len(bin_keys) else 0, step_width, count_width)
            + steps.astype(types[step_width]).tobytes() + counts.astype(types[count_width]).tobytes())


EDGE_SKETCHES = [  # (keys, counts): zero's bin alone, with others, keys far apart, counts of every kind
    ([ZERO_KEY], [3.0]), ([5], [1.0]), ([ZERO_KEY, 7], [2.0, 20.0]), ([1, 300, 70_000], [1.0, 2.0, 3.0]),
    (list(range(-50, 50)), [1.0] * 100), ([ZERO_KEY, *range(10, 15)], [1.0, 2, 3, 4, 5, 6]), ([ZERO_KEY], [0.5]),
    ([-3, -2, 0, 4], [1.5, 2.0, 1.0, 9.0]), ([ZERO_KEY, -40_000, 40_000], [1e10, 1.0, 2.0]), ([], []),
]


def _rows_of(sketches: list[tuple[list[int], list[float]]]) -> Rollups:
    rows = len(sketches)
    return Rollups(np.arange(rows, dtype=np.int64), np.ones(rows), np.ones(rows), np.ones(rows), np.ones(rows),
                   np.ones(rows, bool), np.repeat(np.arange(rows), [len(keys) for keys, _ in sketches]),
                   np.array([key for keys, _ in sketches for key in keys], np.int64),
                   np.array([count for _, counts in sketches for count in counts], np.float64))


@pytest.mark.parametrize("reverse", [False, True])
def test_sketches_of_every_shape_are_their_own_encoding_and_read_back(reverse: bool) -> None:
    sketches = EDGE_SKETCHES[::-1] if reverse else EDGE_SKETCHES
    rollups = _rows_of(sketches)
    stored = rollups.sketches()
    assert stored == [encode_sketch(np.array(keys, np.int64), np.array(counts)) for keys, counts in sketches]
    back = Rollups.from_stored(rollups.timestamp_ms, rollups.count, rollups.sum, rollups.minimum, rollups.maximum,
                               stored)
    for name in ("bin_row", "bin_key", "bin_count"):
        assert getattr(back, name).tolist() == getattr(rollups, name).tolist(), name
    # sketches stored by an earlier trainmon read back the same, among new ones
    older = [_as_first_stored(np.array(keys, np.int64), np.array(counts)) for keys, counts in sketches]
    mixed = [old if row % 2 else new for row, (old, new) in enumerate(zip(older, stored, strict=True))]
    back = Rollups.from_stored(rollups.timestamp_ms, rollups.count, rollups.sum, rollups.minimum, rollups.maximum,
                               mixed)
    for name in ("bin_row", "bin_key", "bin_count"):
        assert getattr(back, name).tolist() == getattr(rollups, name).tolist(), name


def test_a_minutes_sketch_of_mostly_zeros_takes_a_third_of_its_first_form() -> None:
    """A throughput printed every 100 ms, idle 70% of the time: its zeros no longer widen every
    key step, its keys are a bitmap, and its counts half bytes where small."""
    rng = np.random.default_rng(2)
    values = np.where(rng.random(600) < 0.7, 0, rng.lognormal(15, 1.5, 600)).round(0)
    minute = Rollups.from_samples(np.arange(600, dtype=np.int64) * 100, np.ones(600), values, values, values,
                                  values).roll(0, 60_000)
    (stored,) = minute.sketches()
    assert stored is not None
    assert len(stored) * 3 <= len(_as_first_stored(minute.bin_key, minute.bin_count))


@pytest.mark.parametrize("seed", range(10))
def test_rolling_many_series_at_once_is_rolling_each_alone(seed: int) -> None:
    """A write's datapoints of many series rolled up together (``roll_groups``) and merged into the
    stored rows (``placed``, ``merge``) are the rows each series' own roll-ups would be."""
    rng = np.random.default_rng(seed)
    series = [_random_rollups(rng, int(rng.integers(1, 300))) for _ in range(5)]
    together = join(series)
    groups = np.concatenate([np.full(len(part), number) for number, part in enumerate(series)])
    order = np.lexsort((together.timestamp_ms, groups))  # by series, then time: what roll_groups takes
    rolled, rolled_groups = together.take(order).roll_groups(groups[order], 300_000)
    for number, part in enumerate(series):
        alone = part.roll(0, 300_000)
        mine = np.flatnonzero(rolled_groups == number)
        assert rolled.timestamp_ms[mine].tolist() == alone.timestamp_ms.tolist()
        assert rolled.count[mine].tolist() == alone.count.tolist()
        assert rolled.sum[mine].tolist() == alone.sum.tolist()
        assert rolled.sketched[mine].tolist() == alone.sketched.tolist()
        assert [_bins(rolled, row) for row in mine] == [_bins(alone, row) for row in range(len(alone))]
    earlier, later = series[0].roll(0, 300_000), series[1].roll(0, 300_000)
    earlier = earlier.select(np.isin(earlier.timestamp_ms, later.timestamp_ms) & (earlier.timestamp_ms % 600_000 == 0))
    stored = Rollups.placed(earlier, np.flatnonzero(np.isin(later.timestamp_ms, earlier.timestamp_ms)),
                            later.timestamp_ms)  # every other period stored already, the others new
    merged = stored.merge(later)
    expected = concat([earlier, later]).roll(0, 300_000)
    assert merged.timestamp_ms.tolist() == expected.timestamp_ms.tolist()
    for name in ("count", "sum", "minimum", "maximum", "sketched"):
        assert getattr(merged, name).tolist() == getattr(expected, name).tolist(), name
    assert merged.sketches() == expected.sketches()


@pytest.mark.parametrize("seed", range(10))
def test_a_writes_datapoints_roll_up_as_a_row_each_would(seed: int) -> None:
    """``rolled_samples`` (a write's datapoints straight into their minutes' rows) makes the rows
    that a row per datapoint rolled up does, statistic sets, negative values and counts included."""
    rng = np.random.default_rng(seed)
    size = 2000
    groups = np.sort(rng.integers(0, 7, size))
    stamps = np.concatenate([np.sort(rng.integers(0, 20 * 60_000, int((groups == g).sum()))) for g in range(7)])
    values = np.round(rng.lognormal(0, 2, size), 2) * rng.choice([1, 1, 1, -1, 0], size)
    counts = np.ones(size) if seed % 2 else rng.choice([1.0, 0.5, 3.0], size)
    low, high = values.copy(), values.copy()
    sets = rng.random(size) < 0.05  # statistic sets: several values (none known), or one value several times
    high[sets] += rng.choice([0.0, 1.0], int(sets.sum()))
    columns = (stamps.astype(np.int64), counts, values * counts, low, high, np.where(sets, np.nan, values))
    rolled, rolled_groups = Rollups.rolled_samples(groups, 60_000, *columns)
    expected, expected_groups = Rollups.from_samples(*columns).roll_groups(groups, 60_000)
    assert rolled_groups.tolist() == expected_groups.tolist()
    for name in ("timestamp_ms", "count", "sum", "minimum", "maximum", "sketched", "bin_row", "bin_key", "bin_count"):
        assert getattr(rolled, name).tolist() == getattr(expected, name).tolist(), name
    bare, bare_groups = Rollups.rolled_samples(groups, 60_000, *columns, sketches=False)  # (statistics alone)
    assert bare_groups.tolist() == expected_groups.tolist()
    for name in ("timestamp_ms", "count", "sum", "minimum", "maximum"):
        assert getattr(bare, name).tolist() == getattr(expected, name).tolist(), name
    assert not bare.sketched.any() and len(bare.bin_row) == 0


def test_retention_policies() -> None:
    assert parse("").describe() == parse("cloudwatch").describe() == "raw=3h,1m=15d,5m=63d,1h=455d"
    assert parse(CLOUDWATCH).periods == (60, 300, 3600)
    forever = parse("forever")
    assert forever.raw_s is None and all(kept is None for _, kept in forever.tiers) and forever.periods == (60, 300, 3600)
    custom = parse("raw=30m, 60s=2d, 1h=forever")
    assert custom.raw_s == 1800 and custom.tiers == ((60, 172_800), (3600, None))
    for bad, words in (("raw=3h,90s=1d", "multiple of 60"), ("raw=3h,5m=1d,7m=2d", "rolled up from the 5m"),
                       ("60s=1d", "raw datapoints"), ("raw=3 hours", "PERIOD=DURATION"),
                       ("raw=3h,60s=1d,5m=5m", "5m kept for 5m would lose each row"),
                       ("raw=3h,1m=30s", "1m kept for 30s")):
        with pytest.raises(ValidationException, match=words):
            parse(bad)


# -- the store, each backend ---------------------------------------------------------------------


def _series(start_s: int, end_s: int, seed: int = 3, negative: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A 1-second series over [start_s, end_s): latencies with three decimals, some zero."""
    rng = np.random.default_rng(seed)
    stamps = np.arange(start_s, end_s, dtype=np.int64) * 1000
    values = np.round(rng.lognormal(3, 0.7, len(stamps)), 3)
    values[::97] = 0.0
    if negative:
        values[len(values) // 2] = -1.0
    return stamps, values


def _put(store: Store, stamps: np.ndarray, values: np.ndarray, key: MetricKey = KEY, unit: str = "Milliseconds",
         batch: int = 50_000) -> None:
    samples = [Sample(t, 1.0, v, v, v, v, unit) for t, v in zip(stamps.tolist(), values.tolist(), strict=True)]
    for start in range(0, len(samples), batch):
        store.put_samples([(key, 1, samples[start:start + batch])])


def _expected(stamps: np.ndarray, values: np.ndarray, start_ms: int, end_ms: int, period_s: int) -> dict[int, np.ndarray]:
    inside = (stamps >= start_ms) & (stamps < end_ms)
    slots = (stamps[inside] - start_ms) // (period_s * 1000)
    return {start_ms + int(s) * period_s * 1000: values[inside][slots == s] for s in np.unique(slots)}


def _statistics(client: CloudWatchClient, start_s: int, end_s: int, period: int,
                key: MetricKey = KEY) -> list[dict]:
    """The five statistics and p0, p50, p99, p100 per period (CloudWatch wants two calls for that)."""
    request = dict(Namespace=key.namespace, MetricName=key.name, StartTime=start_s, EndTime=end_s, Period=period,
                   Dimensions=[{"Name": n, "Value": v} for n, v in key.dimensions])
    datapoints = client.get_metric_statistics(**request, Statistics=list(STATISTICS))["Datapoints"]
    extended = client.get_metric_statistics(**request, ExtendedStatistics=["p0", "p50", "p99", "p100"])["Datapoints"]
    assert [p["Timestamp"] for p in extended] == [p["Timestamp"] for p in datapoints]
    for point, more in zip(datapoints, extended, strict=True):
        if "ExtendedStatistics" in more:
            point["ExtendedStatistics"] = more["ExtendedStatistics"]
    return datapoints


def _check(datapoints: list[dict], expected: dict[int, np.ndarray], *, percentiles: bool = True) -> None:
    assert [round(p["Timestamp"].timestamp() * 1000) for p in datapoints] == list(expected)
    for point, data in zip(datapoints, expected.values(), strict=True):
        assert point["SampleCount"] == len(data)
        assert point["Sum"] == pytest.approx(data.sum(), rel=1e-12)
        assert point["Average"] == pytest.approx(data.mean(), rel=1e-12)
        assert point["Minimum"] == data.min() and point["Maximum"] == data.max()
        if not percentiles:
            assert "ExtendedStatistics" not in point
            continue
        ordered = np.sort(data)
        for name, q in (("p0", 0.0), ("p50", 0.5), ("p99", 0.99), ("p100", 1.0)):
            true = ordered[math.floor(q * (len(data) - 1))]
            assert abs(point["ExtendedStatistics"][name] - true) <= RELATIVE_ACCURACY * true + 1e-12


def test_statistics_come_from_the_rollups_and_match_numpy(store_target: StoreTarget) -> None:
    store = store_target.open()
    try:
        now = int(time.time())
        start = (now // 3600 - 6) * 3600
        stamps, values = _series(start, now)
        _put(store, stamps, values)
        client = CloudWatchClient(store)
        for maintained in (False, True):
            for period in (3600, 300, 60):  # the writes rolled the datapoints up: no pass needed
                assert store.metric_data(KEY, start * 1000, now * 1000, period)[0] is not None
                _check(_statistics(client, start, now, period),
                       _expected(stamps, values, start * 1000, now * 1000, period))
            if not maintained:
                done = store.maintain(now * 1000)
                assert done.ran and done.rolled_series == 0  # nothing left for maintenance to roll up
        # A datapoint older than the roll-ups arrives late: it is merged into every tier.
        client.put_metric_data(Namespace="App", MetricData=[{
            "MetricName": "Latency", "Dimensions": DIMENSIONS, "Timestamp": start + 10, "Value": 5000.0,
            "Unit": "Milliseconds", "StorageResolution": 1}])
        stamps, values = np.append(stamps, (start + 10) * 1000), np.append(values, 5000.0)
        order = np.argsort(stamps, kind="stable")
        for period in (3600, 60):
            _check(_statistics(client, start, now, period),
                   _expected(stamps[order], values[order], start * 1000, now * 1000, period))
    finally:
        store.close()


def _same_answer(first: list[dict], second: list[dict], *, sums: float = 0.0) -> None:
    """Two answers are the same: every figure equal, Sum and Average within ``sums`` (relative)."""
    assert [(p["Timestamp"], p["Unit"]) for p in first] == [(p["Timestamp"], p["Unit"]) for p in second]
    for one, other in zip(first, second, strict=True):
        assert one.keys() == other.keys()
        for name, value in one.items():
            assert value == (pytest.approx(other[name], rel=sums) if name in ("Sum", "Average") else other[name])


def test_data_no_pass_has_maintained_reads_as_maintained_data(store_target: StoreTarget) -> None:
    """Each write rolls its datapoints up: what GetMetricStatistics answers before any maintenance
    pass is what it answers after one, and what maintenance answers once it has rolled the same data
    up at once from the datapoints (as it did all data before writes rolled up): in every tier,
    percentiles included, however the data came (large writes and small ones, late and out of order
    datapoints into periods rolled up already, statistic sets, two units)."""
    store = store_target.open(parse("forever"))  # nothing expires between the reads
    try:
        now = int(time.time())
        start = (now // 3600 - 5) * 3600
        stamps, values = _series(start, start + 3 * 3600)
        _put(store, stamps, values, batch=5000)  # large writes, sealed at once
        more_stamps, more_values = _series(start + 3 * 3600, start + 4 * 3600, seed=4)
        _put(store, more_stamps, more_values, batch=90)  # small ones, each merged into the same periods
        client = CloudWatchClient(store)
        end = start + 4 * 3600
        asked = [(start, end, 60), (start, end, 120), (start, end, 300), (start, end, 3600), (start, end, 7200),
                 (start + 60, end, 300), (start, end - 1234, 3600)]  # the coarsest tier that serves; a raw tail

        def answers() -> list[list[dict]]:
            return [_statistics(client, first, last, period) for first, last, period in asked]

        first = answers()
        all_stamps, all_values = np.r_[stamps, more_stamps], np.r_[values, more_values]
        for (low, high, period), answer in zip(asked, first, strict=True):
            _check(answer, _expected(all_stamps, all_values, low * 1000, high * 1000, period))
        rng = np.random.default_rng(6)
        late = rng.permutation(len(stamps))[:3000]
        _put(store, stamps[late] + 500, np.round(rng.lognormal(3, 0.7, 3000), 3), batch=700)  # late, out of order
        store.put_samples([(KEY, 1, [Sample((start + 100) * 1000, 4.0, 10.0, 1.0, 4.0, None, "Milliseconds"),
                                     Sample((start + 4000) * 1000, 1.0, 2.0, 2.0, 2.0, 2.0, "Seconds")])])
        before = answers()
        assert before[0] != first[0] and all(answer for answer in before)
        done = store.maintain(now * 1000)
        assert done.ran and done.rolled_series == 0
        assert answers() == before
        _as_written_by_an_earlier_trainmon(store)
        assert store.maintain(now * 1000).rolled_series == 1  # rolled up from the datapoints, at once
        for maintained, unmaintained in zip(answers(), before, strict=True):
            _same_answer(maintained, unmaintained, sums=1e-12)  # (added up in another order)
        assert store.maintain(now * 1000).rolled_series == 0
    finally:
        store.close()


def test_two_writers_of_one_series_roll_up_every_datapoint_once(store_target: StoreTarget) -> None:
    writers = store_target.open(), store_target.open()
    try:
        now = int(time.time())
        start = (now // 3600 - 2) * 3600
        stamps, values = _series(start, start + 3600)
        failed: list[BaseException] = []

        def write(store: Store, every: slice) -> None:
            try:
                _put(store, stamps[every], values[every], batch=60)  # 30 writes each, into the same periods
            except BaseException as exc:
                failed.append(exc)

        threads = [threading.Thread(target=write, args=(store, slice(half, None, 2)))
                   for half, store in enumerate(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failed == []
        for period in (60, 3600):
            _check(_statistics(CloudWatchClient(writers[0]), start, start + 3600, period),
                   _expected(stamps, values, start * 1000, (start + 3600) * 1000, period))
    finally:
        for store in writers:
            store.close()


def test_negative_values_have_no_percentiles_after_rollup(store_target: StoreTarget) -> None:
    store = store_target.open()
    try:
        now = int(time.time())
        start = (now // 3600 - 4) * 3600
        stamps, values = _series(start, start + 7200, negative=True)
        _put(store, stamps, values)
        store.maintain(now * 1000)
        datapoints = _statistics(CloudWatchClient(store), start, start + 7200, 3600)
        expected = _expected(stamps, values, start * 1000, (start + 7200) * 1000, 3600)
        _check(datapoints[:1], dict(list(expected.items())[:1]))
        _check(datapoints[1:], dict(list(expected.items())[1:]), percentiles=False)  # the hour holding -1
    finally:
        store.close()


def test_raw_data_and_tiers_expire_as_the_policy_says(store_target: StoreTarget) -> None:
    store = store_target.open(parse("raw=1h,60s=15d,300s=63d,3600s=455d"))
    try:
        now = int(time.time())
        old = (now // 3600 - 24 * 20) * 3600  # 20 days ago: only the 5-minute and hourly tiers keep it
        recent = (now // 3600 - 5) * 3600
        for start in (old, recent):
            stamps, values = _series(start, start + 7200)
            _put(store, stamps, values)
        done = store.maintain(now * 1000)
        assert done.expired_chunks > 0 and done.expired_rollups > 0
        assert store.metric_samples(KEY, 0, (now - 3600) * 1000) == []  # raw: kept an hour
        assert store.metric_data(KEY, old * 1000, (old + 7200) * 1000, 60)[0] == {}  # the 1-minute tier: 15 days
        assert len(store.metric_data(KEY, old * 1000, (old + 7200) * 1000, 300)[0]["Milliseconds"]) == 24
        client = CloudWatchClient(store)
        stamps, values = _series(old, old + 7200)
        _check(_statistics(client, old, old + 7200, 300), _expected(stamps, values, old * 1000, (old + 7200) * 1000, 300))
        stamps, values = _series(recent, recent + 7200)
        _check(_statistics(client, recent, recent + 7200, 60),
               _expected(stamps, values, recent * 1000, (recent + 7200) * 1000, 60))
    finally:
        store.close()


def test_a_row_the_mark_falls_in_is_expired_only_once_its_period_is_rolled_up(store_target: StoreTarget) -> None:
    """A tier kept a little longer than its period: the five minutes a job's mark falls in are not
    expired half made, to be made again from the rest of their points alone; once the mark has
    passed their end, they expire whole."""
    store = store_target.open(parse("raw=3h,60s=1d,300s=330s,3600s=1d"))
    try:
        begin = (int(time.time()) // 3600 - 2) * 3600  # a whole hour: the five minutes from there
        job = store.create_job("short", {"TrainingJobStatus": "InProgress"}, begin)
        stream = store.add_stream(job.id, "algo-1", "short/algo-1-0", begin * 1000)
        store.write_batch(Batch(job.id, points=[("loss", (begin + i) * 1000, 1.0, "algo-1", stream.id, i)
                                                for i in range(420)]))

        def fives() -> list[tuple[int, int]]:
            return [(int(t) // 1000 - begin, int(c)) for t, c in store._read(  # type: ignore[attr-defined]
                "SELECT timestamp_ms, count FROM rollups WHERE period = 300 ORDER BY 1")]

        store.maintain((begin + 250) * 1000)  # the mark at 3 minutes: the five minutes hold 180 points
        assert fives() == [(0, 180)]
        store.maintain((begin + 340) * 1000)  # past their keeping, but the mark (4 minutes) is not past their end
        assert fives() == [(0, 240)]
        store.maintain((begin + 400) * 1000)  # the mark at 5 minutes: whole, and then expired
        assert fives() == []
        store.maintain((begin + 470) * 1000)  # the next five minutes, begun: nothing made again of the first
        assert fives() == [(300, 60)]
    finally:
        store.close()


def test_keeping_everything_expires_nothing(store_target: StoreTarget) -> None:
    store = store_target.open(parse("forever"))
    try:
        now = int(time.time())
        start = (now // 3600 - 24 * 500) * 3600  # older than every CloudWatch tier
        stamps, values = _series(start, start + 600)
        _put(store, stamps, values)
        done = store.maintain(now * 1000)
        assert done.expired_chunks == done.expired_rollups == 0
        assert len(store.metric_samples(KEY, 0, now * 1000)) == len(stamps)
        rollups = store.metric_data(KEY, start * 1000, (start + 3600) * 1000, 3600)[0]
        assert rollups is not None and rollups["Milliseconds"].count.tolist() == [600.0]
    finally:
        store.close()


def _job_with_points(store: Store, points: int, start_ms: int) -> tuple[int, int]:
    job = store.create_job("sealed", {"TrainingJobStatus": "InProgress"}, time.time())
    stream = store.add_stream(job.id, "algo-1", "sealed/algo-1-0", start_ms)
    rng = np.random.default_rng(4)
    loss = [float(f"{v:.4f}") for v in 2 * np.exp(-np.arange(points) / 3000) + rng.normal(0, 0.02, points)]
    for first in range(0, points, 1000):
        store.write_batch(Batch(job.id, points=[
            ("loss", start_ms + i * 1000, loss[i], "algo-1", stream.id, 2 * i) for i in range(first, first + 1000)]))
    return job.id, stream.id


def _scalar(store: Store, sql: str) -> float:
    return store._read(sql)[0][0]  # type: ignore[attr-defined]


def test_sealing_keeps_every_point_and_packs_them_small(store_target: StoreTarget) -> None:
    store = store_target.open()
    try:
        start_ms = (int(time.time()) - 86_400) * 1000
        job_id, _ = _job_with_points(store, 20_000, start_ms)
        before = store.points(job_id)
        assert _scalar(store, "SELECT count(*) FROM chunks") == 20
        done = store.maintain(int(time.time() * 1000))
        assert done.sealed_points == 20_000
        assert store.points(job_id) == before
        assert _scalar(store, "SELECT count(*) FROM chunks WHERE sealed = 0") == 0
        assert _scalar(store, "SELECT sum(length(data)) FROM chunks") / 20_000 <= 4
        assert store.final_metrics(job_id) == [("loss", before[-1].value, before[-1].timestamp_ms)]
        again = store.maintain(int(time.time() * 1000))
        assert again.sealed_points == 0  # nothing new: sealed chunks are left alone
    finally:
        store.close()


def test_maintenance_runs_in_one_process_at_a_time(store_target: StoreTarget) -> None:
    store = store_target.open()
    other = store_target.open()
    try:
        now_ms = int(time.time() * 1000)
        with store._transaction() as sql:  # type: ignore[attr-defined]
            sql.rows("UPDATE maintenance SET holder = 'elsewhere:1', until_ms = ? WHERE id = 1", (now_ms + 60_000,))
        assert not other.maintain(now_ms).ran
        assert other.maintain(now_ms + 120_000).ran  # an expired lease is taken over
    finally:
        store.close()
        other.close()


def test_writers_go_on_while_maintenance_runs(store_target: StoreTarget) -> None:
    writer, maintainer = store_target.open(), store_target.open()
    try:
        start_ms = (int(time.time()) - 7200) * 1000
        job = writer.create_job("busy", {"TrainingJobStatus": "InProgress"}, time.time())
        stream = writer.add_stream(job.id, "algo-1", "busy/algo-1-0", start_ms)
        stop = threading.Event()
        passes = []

        def maintain() -> None:
            while not stop.is_set():
                passes.append(maintainer.maintain(int(time.time() * 1000)))

        thread = threading.Thread(target=maintain)
        thread.start()
        for batch in range(60):
            writer.write_batch(Batch(job.id, points=[
                ("loss", start_ms + (batch * 100 + i) * 100, float(i), "algo-1", stream.id, batch * 100 + i)
                for i in range(100)]))
        stop.set()
        thread.join()
        assert passes and all(p.ran for p in passes)
        maintainer.maintain(int(time.time() * 1000))
        points = writer.points(job.id)
        assert [p.seq for p in points] == list(range(6000))
        datapoints = CloudWatchClient(writer).get_metric_statistics(
            Namespace="/aws/sagemaker/TrainingJobs", MetricName="loss",
            Dimensions=[{"Name": "TrainingJobName", "Value": "busy"}], StartTime=start_ms // 1000 - 3600,
            EndTime=time.time(), Period=3600, Statistics=["SampleCount", "Sum"])["Datapoints"]
        assert sum(p["SampleCount"] for p in datapoints) == 6000
        assert sum(p["Sum"] for p in datapoints) == 60 * sum(range(100))
    finally:
        writer.close()
        maintainer.close()


def test_the_background_maintainer_seals_and_rolls_up(store_target: StoreTarget) -> None:
    store = store_target.open()
    try:
        now = int(time.time())
        stamps, values = _series(now - 7200, now - 600)
        _put(store, stamps, values, batch=500)  # small writes: packed, for maintenance to seal
        maintainer = Maintainer(store, every_s=0.05, first_after_s=0)
        maintainer.start()
        deadline = time.monotonic() + 60
        while not maintainer.passes and time.monotonic() < deadline:
            time.sleep(0.05)
        maintainer.stop()
        assert maintainer.error is None and maintainer.passes[0].sealed_points == len(stamps)
        assert _scalar(store, "SELECT count(*) FROM chunks WHERE sealed = 0") == 0
    finally:
        store.close()


def test_the_series_writes_keep_busy_are_sealed_within_seconds(store_target: StoreTarget) -> None:
    """A running job's recent points are a chunk a write: those of a metric with BUSY_CHUNKS
    unsealed chunks are sealed every few seconds, however young, each point kept in its order,
    and a metric with few chunks is left for the minute's pass."""
    store = store_target.open()
    clock = ManualClock()
    maintainer = Maintainer(store, first_after_s=0, every_s=3600, clock=clock)
    try:
        now_ms = int(time.time() * 1000)
        job = store.create_job("busy", {"TrainingJobStatus": "InProgress"}, time.time())
        stream = store.add_stream(job.id, "algo-1", "busy/algo-1-0", now_ms)
        for write in range(upkeep.BUSY_CHUNKS + 6):  # a write every 100 ms: loss in each, step in a few
            first = write * 10
            points = [("loss", now_ms + 10 * i, float(i % 13), "algo-1", stream.id, i) for i in range(first, first + 10)]
            if write % 10 == 0:
                points.append(("step", now_ms + 10 * first, float(write), "algo-1", stream.id, first))
            store.write_batch(Batch(job.id, points=points))
        written = store.points(job.id)
        clock.start(maintainer)  # its first pass: the points are under a minute old, nothing sealed
        assert maintainer.passes[0].sealed_points == 0 and maintainer.sealed_busy == 0
        clock.advance(SEAL_BUSY_EVERY_S)
        assert maintainer.error is None and maintainer.sealed_busy == 10 * (upkeep.BUSY_CHUNKS + 6)
        chunks = dict(store._read(  # type: ignore[attr-defined]
            "SELECT s.name, count(*) FROM chunks c JOIN series s ON s.id = c.series_id GROUP BY s.name"))
        assert chunks == {"loss": 1, "step": len(range(0, upkeep.BUSY_CHUNKS + 6, 10))}
        assert store.points(job.id) == written
        assert store.seal_busy().sealed_points == 0  # done: nothing busy left
        clock.advance(SEAL_BUSY_EVERY_S)
        assert maintainer.sealed_busy == 10 * (upkeep.BUSY_CHUNKS + 6)
    finally:
        maintainer.stop()
        store.close()


def test_a_large_write_is_stored_sealed_at_once(store_target: StoreTarget) -> None:
    """The file holds a large write in its sealed encoding from the start (no packed form to shrink
    later), and reads give every datapoint back."""
    store = store_target.open()
    try:
        now = int(time.time())
        stamps, values = _series(now - 7200, now - 600)
        _put(store, stamps, values)
        stored = _scalar(store, "SELECT sum(length(data)) FROM chunks")
        assert stored / len(stamps) < 4  # bytes a datapoint, where the packed form takes 48
        back = store.metric_columns(KEY, 0, 2**62)["Milliseconds"]
        assert back.timestamp_ms.tolist() == stamps.tolist() and back.value.tolist() == values.tolist()
    finally:
        store.close()


def test_what_maintenance_replaces_leaves_the_store(store_target: StoreTarget) -> None:
    """Half-hours of small writes, each sealed by a maintenance pass: the packed chunks it replaces
    leave the store at once, not for a later vacuum (SQLite: their pages go back to the file system;
    PostgreSQL: their rows are vacuumed, so the next hour's writes reuse the room), and the chunks
    take about their sealed size."""
    store = store_target.open()
    size = ("SELECT pg_total_relation_size('chunks')" if store.database_url else
            "SELECT page_count * page_size FROM pragma_page_count, pragma_page_size")
    try:
        now = int(time.time())
        sizes = []
        for piece in range(4, 0, -1):  # half-hours, within the 3 hours 1-second data is kept
            stamps, values = _series(now - 1800 * (piece + 1), now - 1800 * piece, seed=piece)
            _put(store, stamps, values, batch=60)  # 30 writes: packed chunks, merged and sealed by maintenance
            assert store.maintain(now * 1000).sealed_points >= len(stamps)  # (with the last hour's, not full yet)
            sizes.append(_scalar(store, size))
        assert _scalar(store, "SELECT sum(count) FROM chunks") == 4 * 1800
        assert _scalar(store, "SELECT count(*) FROM chunks") == 1  # 120 writes, sealed in one chunk (of up to 8,192)
        assert _scalar(store, "SELECT sum(length(data)) FROM chunks") / (4 * 1800) < 4
        if not store.database_url:
            assert _scalar(store, "PRAGMA freelist_count") == 0
        assert sizes[-1] < 2 * sizes[0], sizes  # about the sealed data; the room the packed writes took is reused
    finally:
        store.close()


def test_late_job_points_fold_into_the_rollups_and_nan_ones_are_kept_aside(store_target: StoreTarget) -> None:
    store = store_target.open()
    try:
        now = int(time.time())
        start = (now // 3600 - 3) * 3600
        job = store.create_job("late", {"TrainingJobStatus": "InProgress"}, time.time())
        stream = store.add_stream(job.id, "algo-1", "late/algo-1-0", start * 1000)
        store.write_batch(Batch(job.id, points=[("loss", (start + i) * 1000, 1.0, "algo-1", stream.id, i)
                                                for i in range(100)]))
        store.maintain(now * 1000)  # rolled up: the hours before the last are final
        store.write_batch(Batch(job.id, points=[("loss", (start + 200) * 1000, None, "algo-1", stream.id, 100)]))
        store.write_batch(Batch(job.id, points=[("loss", (start + 201) * 1000, 5.0, "algo-1", stream.id, 101)]))
        datapoints = CloudWatchClient(store).get_metric_statistics(
            Namespace="/aws/sagemaker/TrainingJobs", MetricName="loss",
            Dimensions=[{"Name": "TrainingJobName", "Value": "late"}], StartTime=start, EndTime=start + 3600,
            Period=3600, Statistics=["SampleCount", "Sum", "Maximum"])["Datapoints"]
        assert [(p["SampleCount"], p["Sum"], p["Maximum"]) for p in datapoints] == [(101.0, 105.0, 5.0)]
        assert store.metric_data(JOB_KEY_LATE, start * 1000, (start + 3600) * 1000, 3600)[0] is not None
        assert len(store.points(job.id)) == 102  # the NaN point too
    finally:
        store.close()


JOB_KEY_LATE = MetricKey("/aws/sagemaker/TrainingJobs", "loss", (("TrainingJobName", "late"),))


def test_statistics_read_while_a_pass_rolls_the_series_up_count_each_point_once(
        store_target: StoreTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read of several statements sees one snapshot: a pass of another process that commits
    between the read's look at the series' mark and its read of the roll-ups (merging what followed
    the mark into the hour the mark fell in) is not half seen, its roll-ups beside the raw data from
    the old mark (PostgreSQL's default isolation gave each statement its own snapshot)."""
    policy = parse("raw=forever,60s=forever,300s=forever,3600s=forever")
    store, other = store_target.open(policy), store_target.open(policy)  # other: another process's maintainer
    try:
        hour = (int(time.time()) // 3600 - 4) * 3600
        job = store.create_job("race", {"TrainingJobStatus": "InProgress"}, hour)
        stream = store.add_stream(job.id, "algo-1", "race/algo-1-0", hour * 1000)
        store.write_batch(Batch(job.id, points=[("loss", (hour + i) * 1000, 1.0, "algo-1", stream.id, i)
                                                for i in range(3 * 3600)]))
        store.maintain((hour + 4860) * 1000)  # rolled up to 80 minutes in
        passes: list[Maintenance] = []
        read_rollups = upkeep.read_rollups

        def racing(*args: object, **kwargs: object) -> object:
            if not passes:  # the read has looked at the mark; another process's pass commits
                passes.append(other.maintain((hour + 8460) * 1000))  # to 140 minutes in
            return read_rollups(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr("trainmon.store.series.reads.read_rollups", racing)
        request = dict(Namespace="/aws/sagemaker/TrainingJobs", MetricName="loss", StartTime=hour,
                       EndTime=hour + 3 * 3600, Period=3600, Statistics=["SampleCount"],
                       Dimensions=[{"Name": "TrainingJobName", "Value": "race"}])
        during = CloudWatchClient(store).get_metric_statistics(**request)["Datapoints"]
        assert passes and passes[0].rolled_series == 1
        assert [p["SampleCount"] for p in during] == [3600.0] * 3
        monkeypatch.undo()
        after = CloudWatchClient(store).get_metric_statistics(**request)["Datapoints"]
        assert [p["SampleCount"] for p in after] == [3600.0] * 3
    finally:
        store.close()
        other.close()


def test_a_running_jobs_points_are_rolled_up_to_the_minute_and_its_hour_merged_pass_by_pass(
        store_target: StoreTarget) -> None:
    """Each pass rolls a job's points up to the last whole minute (a minute ago), not the last whole
    hour: the statistics of a job an hour in read the raw points of its last minute or two. The
    hour and the five minutes the mark falls in hold what came before it, and the next pass (or a
    late point, written after the pass) merges the rest into their rows; every answer, before and
    after each pass, is what numpy makes of the points."""
    store = store_target.open(parse("forever"))
    try:
        hour = (int(time.time()) // 3600 - 2) * 3600  # the job begins 50 minutes into it
        key = MetricKey("/aws/sagemaker/TrainingJobs", "loss", (("TrainingJobName", "minutes"),))
        job = store.create_job("minutes", {"TrainingJobStatus": "InProgress"}, hour + 3000)
        stream = store.add_stream(job.id, "algo-1", "minutes/algo-1-0", (hour + 3000) * 1000)
        rng = np.random.default_rng(8)
        stamps = np.arange((hour + 3000) * 1000, (hour + 5100) * 1000, 500, dtype=np.int64)  # 50 to 85 minutes
        values = np.round(rng.lognormal(0, 0.5, len(stamps)), 4)
        written: list[tuple[int, float]] = []

        def write(first_ms: int, last_ms: int) -> None:
            for low in range(first_ms, last_ms, 30_000):  # a write per 30 s of points, as a supervisor's batches
                inside = (stamps >= low) & (stamps < min(low + 30_000, last_ms))
                store.write_batch(Batch(job.id, points=[
                    ("loss", t, v, "algo-1", stream.id, len(written) + i)
                    for i, (t, v) in enumerate(zip(stamps[inside].tolist(), values[inside].tolist(), strict=True))]))
                written.extend(zip(stamps[inside].tolist(), values[inside].tolist(), strict=True))

        client = CloudWatchClient(store)
        start, end = hour + 3000, hour + 5160

        def check(rolled: bool) -> None:
            """Every answer is numpy's of the points: percentiles from the sketches once rolled up,
            else interpolated between the ranks around them."""
            got_stamps = np.array([t for t, _ in written], np.int64)
            got_values = np.array([v for _, v in written])
            order = np.argsort(got_stamps, kind="stable")
            for period in (60, 300, 600, 3600):
                answer = _statistics(client, start, end, period, key)
                expected = _expected(got_stamps[order], got_values[order], start * 1000, end * 1000, period)
                if rolled:
                    _check(answer, expected)
                else:
                    _check([{k: v for k, v in p.items() if k != "ExtendedStatistics"} for p in answer], expected,
                           percentiles=False)
                    assert [point["ExtendedStatistics"]["p99"] for point in answer] == pytest.approx(
                        [np.percentile(data, 99) for data in expected.values()], rel=1e-12)

        def rolled_ms() -> int:
            return int(_scalar(store, f"SELECT rolled_ms FROM series WHERE id = {series_id}"))

        write((hour + 3000) * 1000, (hour + 4230) * 1000)  # to 70.5 minutes
        series_id = int(_scalar(store, "SELECT id FROM series WHERE job_id IS NOT NULL"))
        check(rolled=False)
        assert store.maintain((hour + 4250) * 1000).rolled_series == 1
        assert rolled_ms() == (hour + 4140) * 1000  # 69 minutes: the last whole one that ended a minute ago
        assert store.metric_data(key, (hour + 3600) * 1000, (hour + 7200) * 1000, 3600)[0] is not None
        check(rolled=True)
        late = stamps[(stamps >= (hour + 3700) * 1000) & (stamps < (hour + 3710) * 1000)] + 250  # before the mark
        store.write_batch(Batch(job.id, points=[("loss", t, 9.5, "algo-1", stream.id, len(written) + i)
                                                for i, t in enumerate(late.tolist())]))
        written.extend((t, 9.5) for t in late.tolist())
        write((hour + 4230) * 1000, (hour + 5100) * 1000)  # to 85 minutes
        check(rolled=True)
        assert store.maintain((hour + 5130) * 1000).rolled_series == 1
        assert rolled_ms() == (hour + 5040) * 1000
        check(rolled=True)
        hours = store._read(  # type: ignore[attr-defined]
            f"SELECT timestamp_ms, count FROM rollups WHERE series_id = {series_id} AND period = 3600 ORDER BY 1")
        assert [(int(t), int(c)) for t, c in hours] == [
            (hour * 1000, 1200), ((hour + 3600) * 1000, sum(hour + 3600 <= t // 1000 < hour + 5040 for t, _ in written))]
    finally:
        store.close()


def test_a_period_of_fractional_counts_takes_its_percentiles_from_its_own_values(store_target: StoreTarget) -> None:
    store = store_target.open()
    try:
        now = int(time.time())
        start = (now // 3600 - 3) * 3600
        client = CloudWatchClient(store)
        for offset, value, count in ((0, 100.0, 1.0), (60, 1.0, 0.5)):
            client.put_metric_data(Namespace="App", MetricData=[{
                "MetricName": "Latency", "Dimensions": DIMENSIONS, "Timestamp": start + offset, "Values": [value],
                "Counts": [count], "Unit": "Milliseconds", "StorageResolution": 1}])
        store.maintain(now * 1000)
        assert store.metric_data(KEY, start * 1000, (start + 120) * 1000, 60)[0] is not None
        datapoints = client.get_metric_statistics(
            Namespace="App", MetricName="Latency", Dimensions=DIMENSIONS, StartTime=start, EndTime=start + 120,
            Period=60, ExtendedStatistics=["p50", "p100"])["Datapoints"]
        assert [p["ExtendedStatistics"]["p100"] for p in datapoints] == [pytest.approx(100.0, rel=RELATIVE_ACCURACY),
                                                                         pytest.approx(1.0, rel=RELATIVE_ACCURACY)]
        assert datapoints[1]["ExtendedStatistics"]["p50"] == pytest.approx(1.0, rel=RELATIVE_ACCURACY)
    finally:
        store.close()


def test_maintenance_goes_on_when_a_job_is_deleted_during_a_pass(store_target: StoreTarget) -> None:
    store = store_target.open()
    try:
        now = int(time.time())
        job_id, _ = _job_with_points(store, 1000, (now - 7200) * 1000)
        _put(store, *_series(now - 7200, now - 3600))
        _as_written_by_an_earlier_trainmon(store)  # (the put metric too, so that the pass has two to roll up)
        opened = 0

        @contextmanager
        def transaction() -> Iterator[Sql]:
            nonlocal opened
            opened += 1
            with store._transaction() as sql:  # type: ignore[attr-defined]
                yield sql
            if opened == 2:  # the series are listed: the job goes now
                store.delete_job("sealed")

        done = upkeep.maintain(transaction, store.retention, now * 1000)
        assert done.ran and done.rolled_series == 1  # the other metric's
        assert store.points(job_id) == []
        assert store.metric_data(KEY, (now // 3600 - 2) * 3600_000, now * 1000, 3600)[0] is not None
    finally:
        store.close()


JOB_KEY_TIERS = MetricKey("/aws/sagemaker/TrainingJobs", "loss", (("TrainingJobName", "tiers"),))


def _job_statistics(client: CloudWatchClient, start_s: int, end_s: int, period: int) -> list[dict]:
    return client.get_metric_statistics(
        Namespace=JOB_KEY_TIERS.namespace, MetricName="loss", Dimensions=[{"Name": "TrainingJobName", "Value": "tiers"}],
        StartTime=start_s, EndTime=end_s, Period=period, Statistics=["SampleCount", "Sum", "Minimum", "Maximum"],
    )["Datapoints"]


@pytest.mark.parametrize("rows_a_slice", [upkeep.REBUILD_SOURCE_ROWS, 7])
def test_roll_ups_follow_a_changed_policy_with_every_datapoint(store_target: StoreTarget, rows_a_slice: int,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """The roll-ups are the store's: a process with other tiers reads and writes the store's until
    trainmon maintain's pass brings them to its tiers, each new one built from the finer data
    already rolled up (a slice of time a transaction), so that statistics over data written before
    the change are whole. A pass cut short is done again whole; writes while a pass builds go into
    both policies' tiers."""
    monkeypatch.setattr(upkeep, "REBUILD_SOURCE_ROWS", rows_a_slice)
    hourly = store_target.open(parse("raw=forever,60s=forever,300s=forever,3600s=forever"))
    two_hourly = store_target.open(parse("raw=forever,60s=forever,600s=forever,7200s=forever"))
    try:
        now = int(time.time())
        start = (now // 7200 - 4) * 7200  # 8 hours ago, at a 2-hour boundary
        stamps, values = _series(start, start + 5 * 3600)
        _put(hourly, stamps, values, batch=3000)
        job = hourly.create_job("tiers", {"TrainingJobStatus": "InProgress"}, time.time())
        stream = hourly.add_stream(job.id, "algo-1", "tiers/algo-1-0", start * 1000)
        job_stamps = np.arange(start, start + 5 * 3600, 7, dtype=np.int64) * 1000
        job_values = np.round(np.random.default_rng(8).normal(1, 0.3, len(job_stamps)), 3)

        def job_points(store: Store, rows: slice) -> None:
            store.write_batch(Batch(job.id, points=[
                ("loss", int(t), float(v), "algo-1", stream.id, int(i)) for i, t, v in
                zip(range(len(job_stamps))[rows], job_stamps[rows], job_values[rows], strict=True)]))

        first_part = job_stamps < (start + 3 * 3600) * 1000
        job_points(hourly, slice(0, int(first_part.sum())))
        # Rolled up to an odd hour: whole hours, but not whole periods of the new coarsest tier.
        assert hourly.maintain((start + 3 * 3600 + 120) * 1000).rolled_series == 1
        client = CloudWatchClient(two_hourly)
        end = start + 5 * 3600
        for period in (60, 600, 3600, 7200):  # before its pass, the other policy reads the store's tiers
            _check(_statistics(client, start, end, period), _expected(stamps, values, start * 1000, end * 1000, period))
        with two_hourly._transaction() as sql:  # type: ignore[attr-defined]
            sql.rows("UPDATE maintenance SET building = '60,600,7200' WHERE id = 1")  # a pass cut short
        more_stamps, more_values = _series(start + 5 * 3600, start + 6 * 3600, seed=9)
        _put(two_hourly, more_stamps, more_values, batch=1000)  # merged into both policies' tiers
        job_points(two_hourly, slice(int(first_part.sum()), None))
        stamps, values, end = np.r_[stamps, more_stamps], np.r_[values, more_values], start + 6 * 3600

        done = two_hourly.maintain(now * 1000)  # a background pass leaves the store's tiers as they are
        assert done.retiered_series == 0 and done.rolled_series == 1
        assert two_hourly.metric_data(KEY, start * 1000, end * 1000, 7200, sketches=False)[0]["Milliseconds"] \
            .count.sum() == len(stamps)  # (read from the 1-hour tier: 7,200 s is whole hours)
        with caplog.at_level(logging.INFO, logger=upkeep.log.name):
            assert two_hourly.maintain(now * 1000, retier=True).retiered_series == 2  # trainmon maintain's does
        assert "the store's roll-up tiers change from 1m, 5m, 1h to 1m, 10m, 2h" in caplog.messages  # as the CLI says
        assert two_hourly.maintain(now * 1000, retier=True).retiered_series == 0  # once
        for period in (60, 600, 7200):  # each from its own tier now
            assert two_hourly.metric_data(KEY, start * 1000, end * 1000, period)[0] is not None
            _check(_statistics(client, start, end, period), _expected(stamps, values, start * 1000, end * 1000, period))
        assert len(two_hourly.metric_data(KEY, start * 1000, end * 1000, 7200, sketches=False)[0]["Milliseconds"]) == 3
        assert _scalar(two_hourly, "SELECT count(*) FROM rollups WHERE period IN (300, 3600)") == 0
        job_end = (now // 7200 - 1) * 7200  # what the pass rolled up of the job's points, to a 2-hour boundary
        for period in (600, 7200):
            inside = job_stamps < job_end * 1000
            expected = _expected(job_stamps[inside], job_values[inside], start * 1000, job_end * 1000, period)
            assert two_hourly.metric_data(JOB_KEY_TIERS, start * 1000, job_end * 1000, period)[0] is not None
            answer = _job_statistics(client, start, job_end, period)
            assert [round(p["Timestamp"].timestamp() * 1000) for p in answer] == list(expected)
            for point, data in zip(answer, expected.values(), strict=True):
                assert (point["SampleCount"], point["Minimum"], point["Maximum"]) == (len(data), data.min(), data.max())
                assert point["Sum"] == pytest.approx(data.sum(), rel=1e-12)

        back = store_target.open(parse("raw=forever,60s=forever,300s=forever,3600s=forever"))
        try:  # and back: the tiers left out are built again, from the 1-minute one
            assert back.maintain(now * 1000, retier=True).retiered_series == 2
            for period in (300, 3600):
                _check(_statistics(CloudWatchClient(back), start, end, period),
                       _expected(stamps, values, start * 1000, end * 1000, period))
        finally:
            back.close()
    finally:
        hourly.close()
        two_hourly.close()


def test_tiers_no_finer_tier_divides_are_built_from_the_datapoints_across_gaps(store_target: StoreTarget,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A new tier that no recorded one divides (1 and 5 minutes after 2 minutes) is built from the
    raw datapoints, a slice of time a transaction, jumping the days without data between two bursts."""
    monkeypatch.setattr(upkeep, "REBUILD_SOURCE_ROWS", 7)
    coarse = store_target.open(parse("raw=forever,120s=forever"))
    fine = store_target.open(parse("raw=forever,60s=forever,300s=forever"))
    try:
        now = int(time.time())
        first = (now // 3600 - 24 * 9) * 3600  # nine days ago, and again two hours ago
        stamps, values = (np.concatenate(parts) for parts in zip(_series(first, first + 1800),
                                                                  _series(now // 3600 * 3600 - 7200, now // 3600 * 3600 - 5400,
                                                                          seed=5), strict=True))
        _put(coarse, stamps, values, batch=700)
        assert fine.maintain(now * 1000, retier=True).retiered_series == 1
        client = CloudWatchClient(fine)
        for low, high in ((first, first + 1800), (now // 3600 * 3600 - 7200, now // 3600 * 3600 - 5400)):
            for period in (60, 300):
                assert fine.metric_data(KEY, low * 1000, high * 1000, period)[0] is not None
                _check(_statistics(client, low, high, period), _expected(stamps, values, low * 1000, high * 1000, period))
        assert _scalar(fine, "SELECT count(*) FROM rollups WHERE period = 120") == 0
    finally:
        coarse.close()
        fine.close()


def test_a_series_made_while_the_tiers_change_gets_the_new_ones_too(postgres_url: str, tmp_path: Path) -> None:
    """PostgreSQL: a write that read the store's tiers before a pass named new ones, and is making a
    new series, is waited for before the pass lists the series to build, so its series is built
    too (on SQLite, write transactions take turns, so it cannot happen)."""
    from trainmon.store import open_store
    from trainmon.store.series import writes

    before = open_store(tmp_path, database_url=postgres_url, retention=parse("raw=forever,60s=forever,300s=forever"))
    after = open_store(tmp_path, database_url=postgres_url, retention=parse("raw=forever,60s=forever,600s=forever"))
    watcher = open_store(tmp_path, database_url=postgres_url)
    try:
        now = int(time.time())
        before.put_samples([(MetricKey("App", "old", ()), 60, [Sample(now * 1000, 1.0, 1.0, 1.0, 1.0, 1.0, "None")])])
        new = MetricKey("App", "new", ())
        prepared = writes.prepare_samples([(new, 60, [Sample((now - 3600 + i) * 1000, 1.0, 1.0, 1.0, 1.0, 1.0, "None")
                                                      for i in range(100)])])
        passes: list[Maintenance] = []
        with before._transaction() as sql:  # type: ignore[attr-defined]
            writes.put_samples(sql, prepared, before._written_tiers)  # type: ignore[attr-defined]  # (60 s, 300 s)
            changing = threading.Thread(target=lambda: passes.append(after.maintain(now * 1000, retier=True)))
            changing.start()
            wait_for(lambda: not changing.is_alive() or bool(watcher._read(  # type: ignore[attr-defined]
                "SELECT 1 FROM pg_locks WHERE NOT granted AND relation = 'series'::regclass")),
                "the pass to wait for the write, or to end")
        changing.join(60)
        assert passes and passes[0].retiered_series == 2
        rolled = after.metric_data(new, (now - 3600) // 600 * 600_000, now * 1000, 600, sketches=False)[0]
        assert rolled is not None and rolled["None"].count.sum() == 100
        assert after._read("SELECT DISTINCT period FROM rollups ORDER BY period") == [(60,), (600,)]  # type: ignore[attr-defined]
    finally:
        before.close()
        after.close()
        watcher.close()


def _as_written_by_an_earlier_trainmon(store: Store) -> None:
    """The store as a trainmon whose writes left roll-ups to maintenance leaves it: no roll-ups,
    every series rolled up to time 0."""
    with store._transaction() as sql:  # type: ignore[attr-defined]
        sql.rows("DELETE FROM rollups")
        sql.rows("UPDATE series SET rolled_ms = 0")


def test_two_maintainers_sealing_one_series_at_once_keep_each_point_once(store_target: StoreTarget) -> None:
    first, second = store_target.open(), store_target.open()
    try:
        now_ms = int(time.time() * 1000)
        job_id, _ = _job_with_points(first, 3000, now_ms - 7_200_000)
        (series_id,) = first._read("SELECT id FROM series")[0]  # type: ignore[attr-defined]

        def seal_too() -> None:
            with second._transaction() as sql:  # type: ignore[attr-defined]
                upkeep._seal(sql, series_id, now_ms, Maintenance())

        other = threading.Thread(target=seal_too)
        with first._transaction() as sql:  # type: ignore[attr-defined]
            upkeep._seal(sql, series_id, now_ms, Maintenance())
            other.start()
            if store_target.backend == "postgres":  # SQLite's second writer waits at BEGIN IMMEDIATE
                deadline = time.monotonic() + 30
                while not sql.rows("SELECT 1 FROM pg_locks WHERE NOT granted") and time.monotonic() < deadline:
                    time.sleep(0.01)
        other.join()
        assert len(first.points(job_id)) == 3000
    finally:
        first.close()
        second.close()


def test_the_metrics_of_one_record_keep_their_order_through_sealing(store_target: StoreTarget) -> None:
    store = store_target.open()
    try:
        start_ms = (int(time.time()) - 7200) * 1000
        job = store.create_job("order", {"TrainingJobStatus": "InProgress"}, time.time())
        stream = store.add_stream(job.id, "algo-1", "order/algo-1-0", start_ms)
        names = ["loss", "acc", "lr", "epoch", "b", "a"]
        store.write_batch(Batch(job.id, points=[(name, start_ms + i * 1000, float(i), "algo-1", stream.id, i)
                                                for i in range(3) for name in names]))
        before = [(p.name, p.seq) for p in store.points(job.id)]
        assert before == [(name, i) for i in range(3) for name in sorted(names)]
        store.maintain(int(time.time() * 1000))
        assert [(p.name, p.seq) for p in store.points(job.id)] == before
    finally:
        store.close()


def test_chunks_are_sealed_and_read_by_many_threads_at_once() -> None:
    """A process seals and reads chunks on several threads (a server's requests, its maintainer):
    each thread's chunks come back exactly."""
    import threading

    from trainmon.store import codec

    rng = np.random.default_rng(11)
    columns = [[np.cumsum(rng.integers(1, 100, 20_000)), rng.normal(0, 1, 20_000)] for _ in range(8)]
    blobs = [codec.seal(c) for c in columns]
    wrong: list[int] = []
    start = threading.Barrier(8)

    def work(index: int) -> None:
        start.wait()
        for _ in range(30):
            again = codec.unpack(codec.seal(columns[index]))
            read = codec.unpack(blobs[index])
            if not all(np.array_equal(a, b) for a, b in zip(again + read, columns[index] * 2, strict=True)):
                wrong.append(index)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


@pytest.mark.parametrize("seed", range(4))
def test_a_metrics_raw_datapoints_are_each_chunks_own_in_range_joined_in_order(store_target: StoreTarget,
                                                                               seed: int) -> None:
    """The datapoints statistics are computed from (a job's points, PutMetricData's datapoints of
    several units, NaN among the points, chunks in any time order, sealed ones among them) are what
    taking each chunk's datapoints in the range and joining them in the chunks' order gives, bit for
    bit: runs of chunks are joined before they are filtered, which must change nothing."""
    from trainmon.cloudwatch.model import job_metric_key
    from trainmon.cloudwatch.statistics import Columns, concat_columns
    from trainmon.store import codec
    from trainmon.store.series import reads
    from trainmon.store.series.writes import POINTS

    rng = np.random.default_rng(seed)
    store = store_target.open()
    try:
        job = store.create_job("mixed", {"TrainingJobName": "mixed", "TrainingJobStatus": "InProgress"}, 1000.0)
        stream = store.add_stream(job.id, "algo-1", "mixed/algo-1-1", 1000)
        key = job_metric_key("mixed", "loss")
        seq = 0
        for _ in range(int(rng.integers(20, 40))):
            first = int(rng.integers(0, 100_000))
            if rng.random() < 0.5:
                count = int(rng.choice([1, 5, 200]))  # 200: stored sealed at once
                values = rng.normal(1, 1, count)
                values[rng.random(count) < 0.1] = np.nan
                store.write_batch(Batch(job.id, points=[
                    ("loss", first + i, None if math.isnan(v) else float(v), "algo-1", stream.id, seq + i)
                    for i, v in enumerate(values.tolist())]))
                seq += count
            else:
                unit = str(rng.choice(["None", "Seconds", "Count"]))
                store.put_samples([(key, 1, [Sample(first + i, 1.0, v, v, v, v, unit)
                                             for i, v in enumerate(rng.normal(5, 1, int(rng.integers(1, 6))).tolist())])])
        start, end = 20_000, 80_000
        found = store.metric_columns(key, start, end)

        def each_chunk(sql: Sql) -> dict[str, Columns]:
            (series, _), parts = reads.series_id(sql, key), {}
            for row in reads._chunk_rows(sql, "series_id = ?", (series,), start, end):
                columns = codec.unpack(bytes(row[7]))
                inside = (columns[0] >= start) & (columns[0] < end)
                if row[1] == POINTS:
                    stamps, values, _ = (column[inside] for column in columns)
                    stamps, values = stamps[np.isfinite(values)], values[np.isfinite(values)]
                    part = Columns(stamps, np.ones(len(stamps)), values, values, values, values)
                else:
                    stamps, values, counts, sums, lows, highs = (column[inside] for column in columns)
                    part = Columns(stamps, counts, sums, lows, highs, values)
                parts.setdefault(row[4], []).append(part)
            return {unit: concat_columns(unit_parts) for unit, unit_parts in parts.items()}

        expected = store._reading(each_chunk)  # type: ignore[attr-defined]
        assert list(found) == list(expected) and len(expected) > 1
        for unit, columns in expected.items():
            assert all(_same(a, b) for a, b in zip(found[unit], columns, strict=True)), unit
    finally:
        store.close()


def test_decoded_chunks_are_kept_by_their_bytes_within_a_budget() -> None:
    """A chunk read again is taken as it was decoded (the same columns, read-only); other bytes
    are decoded anew; what is kept stays within the budget, the least recently read given up
    first, and a chunk too large for it is decoded every time; without a budget, nothing is kept."""
    from trainmon.store import codec

    unkept = codec.Decoded()
    plain = codec.pack([np.arange(10), np.ones(10)])
    assert unkept(plain)[0] is not unkept(plain)[0] and not unkept._kept  # type: ignore[attr-defined]

    decoded = codec.Decoded(budget=64_000)
    rng = np.random.default_rng(3)
    blobs = [codec.pack([np.arange(100) + n, rng.normal(0, 1, 100)]) for n in range(40)]  # about 1.6 kB each
    first = decoded(blobs[0])
    assert all(_same(a, b) for a, b in zip(first, unpack(blobs[0]), strict=True))
    assert not any(column.flags.writeable for column in first)
    again = decoded(bytes(bytearray(blobs[0])))  # the same bytes in another object
    assert all(a is b for a, b in zip(first, again, strict=True))
    changed = bytearray(blobs[0])
    changed[-1] ^= 1
    assert not _same(decoded(bytes(changed))[1], first[1])
    for blob in blobs:
        decoded(blob)
    assert decoded._held <= decoded.budget  # type: ignore[attr-defined]
    assert blobs[-1] in decoded._kept and blobs[0] not in decoded._kept  # type: ignore[attr-defined]
    large = codec.pack([np.arange(10_000), np.zeros(10_000)])
    assert decoded(large)[0].tolist() == list(range(10_000)) and large not in decoded._kept  # type: ignore[attr-defined]


def test_decoded_chunks_are_joined_with_the_kept_ones_taken_as_they_were() -> None:
    """Chunks of one layout joined: what concatenating each one's columns gives, whether kept,
    decoded anew, sealed or packed, with a budget or without; the ones read before are taken as
    kept (and made the most recently read), the others kept from then on."""
    from trainmon.store import codec

    rng = np.random.default_rng(5)
    chunks = [[np.arange(n) + 1000 * n, rng.normal(0, 1, n), np.full(n, n)] for n in (3, 0, 17, 1, 40)]
    blobs = [codec.seal(columns) if n % 2 else codec.pack(columns) for n, columns in enumerate(chunks)]
    expected = [np.concatenate(column) for column in zip(*chunks, strict=True)]
    decoded = codec.Decoded(budget=64_000)
    kept_before = decoded(blobs[2])
    for reader in (codec.Decoded(), decoded, decoded):  # without a budget; then kept, some before, all after
        joined = reader.joined(blobs)
        assert all(_same(a, b) for a, b in zip(joined, expected, strict=True))
    assert list(decoded._kept) == blobs  # each read again, in order: the most recently read last  # type: ignore[attr-defined]
    assert all(a is b for a, b in zip(decoded.joined([blobs[2]]), kept_before, strict=True))  # one chunk: as kept
