"""Roll-ups: statistic sets per period with a mergeable quantile sketch, as arrays.

Percentiles survive roll-up through DDSketch (the ``ddsketch`` library's logarithmic mapping
with a relative accuracy of 1%): a value v lands in bin ``key(v)``, a bin is a count, and two
sketches merge by adding their bins, so a 5-minute roll-up is exactly the merge of its five
1-minute roll-ups. A percentile read from a sketch is within 1% (relative) of the true value of
that rank in the data (the value at rank ``floor(q * (n - 1))``, which is DDSketch's definition):
``|estimate - true| <= 0.01 * true``. Values are non-negative here, as CloudWatch gives no
percentiles for periods that hold negative values; zero has its own bin.

:class:`Rollups` holds rows (one per period and unit) as numpy columns, and each row's bins as
three flat arrays sorted by (row, key), so rolling many rows up and reading a percentile of
every row are a few vectorized operations, whatever the number of periods. The keys are
computed with the library's mapping formula, vectorized; tests check them against
``LogarithmicMapping.key`` and the percentiles against ``DDSketch.get_quantile_value``.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np
from ddsketch.mapping import LogarithmicMapping

RELATIVE_ACCURACY = 0.01
MAPPING = LogarithmicMapping(RELATIVE_ACCURACY)
# LogarithmicMapping.key(v) is ceil(log2(v) * multiplier) (offset 0); its multiplier, computed
# the library's way from the accuracy:
_MULTIPLIER = 1 / math.log1p(2 * RELATIVE_ACCURACY / (1 - RELATIVE_ACCURACY)) * math.log(2)
_LN2 = math.log(2)
ZERO_KEY = np.iinfo(np.int32).min  # values too small to tell from zero (DDSketch's zero bin)
_BLOB = struct.Struct("<IiBB")  # bins, first key, key-step width, count width
_UINTS = (np.uint8, np.uint16, np.uint32)


def keys(values: np.ndarray) -> np.ndarray:
    """Each (non-negative) value's bin."""
    out = np.full(len(values), ZERO_KEY, np.int64)
    positive = values > MAPPING.min_possible
    out[positive] = np.ceil(np.log(values[positive]) / _LN2 * _MULTIPLIER)
    return out


def bin_values(bin_keys: np.ndarray) -> np.ndarray:
    """What each bin stands for (within the relative accuracy of every value in it)."""
    out = np.power(2.0, bin_keys.astype(np.float64) / _MULTIPLIER) * (2.0 / (1 + MAPPING.gamma))
    out[bin_keys == ZERO_KEY] = 0.0
    return out


@dataclass
class Rollups:
    """Rows of statistic sets sorted by time; ``sketched`` rows have their bins in the ``bin_*``
    arrays (row index, key, count, sorted by row then key), other rows have no percentiles."""

    timestamp_ms: np.ndarray
    count: np.ndarray
    sum: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray
    sketched: np.ndarray
    bin_row: np.ndarray
    bin_key: np.ndarray
    bin_count: np.ndarray

    def __len__(self) -> int:
        return len(self.timestamp_ms)

    @classmethod
    def empty(cls) -> Rollups:
        f, i = np.zeros(0), np.zeros(0, np.int64)
        return cls(i, f, f, f, f, np.zeros(0, bool), i, i, f)

    @classmethod
    def from_samples(cls, timestamp_ms: np.ndarray, count: np.ndarray, total: np.ndarray, minimum: np.ndarray,
                     maximum: np.ndarray, value: np.ndarray) -> Rollups:
        """A row per datapoint (sorted by time). ``value`` is NaN for a statistic set, whose
        single values are known only when its minimum equals its maximum."""
        known = np.where(np.isnan(value) & (minimum == maximum), minimum, value)
        sketched = ~np.isnan(known) & (known >= 0)
        rows = np.flatnonzero(sketched)
        return cls(timestamp_ms, count, total, minimum, maximum, sketched, rows, keys(known[rows]), count[rows])

    @classmethod
    def from_stored(cls, timestamp_ms: np.ndarray, count: np.ndarray, total: np.ndarray, minimum: np.ndarray,
                    maximum: np.ndarray, sketches: list[bytes | None]) -> Rollups:
        """Rows read back from the store, their sketches as ``encode`` wrote them (all decoded
        together: rows of one encoding share a few numpy operations)."""
        sketched = np.array([blob is not None for blob in sketches], bool)
        groups: dict[tuple[int, int], list[tuple[int, int, int, bytes]]] = {}
        for row, blob in enumerate(sketches):
            if blob is not None:
                size, first, step_width, count_width = _BLOB.unpack_from(blob)
                if size:
                    groups.setdefault((step_width, count_width), []).append((row, size, first, blob))
        rows, keys_, counts = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0)]
        for (step_width, count_width), members in groups.items():
            sizes = np.array([m[1] for m in members], np.int64)
            step_size = np.dtype(_UINTS[step_width]).itemsize
            count_type = _UINTS[count_width] if count_width < 3 else np.float64
            count_size = np.dtype(count_type).itemsize
            steps = np.frombuffer(b"".join(m[3][_BLOB.size:_BLOB.size + (m[1] - 1) * step_size] for m in members),
                                  _UINTS[step_width])
            counts.append(np.frombuffer(b"".join(m[3][_BLOB.size + (m[1] - 1) * step_size:
                                                      _BLOB.size + (m[1] - 1) * step_size + m[1] * count_size]
                                                 for m in members), count_type).astype(np.float64))
            starts = np.cumsum(sizes) - sizes
            increments = np.empty(int(sizes.sum()), np.int64)
            not_first = np.ones(len(increments), bool)
            not_first[starts] = False
            increments[not_first] = steps
            increments[starts] = np.array([m[2] for m in members], np.int64)
            running = np.cumsum(increments)
            keys_.append(running - np.repeat(running[starts] - increments[starts], sizes))
            rows.append(np.repeat(np.array([m[0] for m in members], np.int64), sizes))
        bin_row, bin_key, bin_count = np.concatenate(rows), np.concatenate(keys_), np.concatenate(counts)
        if len(groups) > 1:
            order = np.lexsort((bin_key, bin_row))
            bin_row, bin_key, bin_count = bin_row[order], bin_key[order], bin_count[order]
        return cls(timestamp_ms, count, total, minimum, maximum, sketched, bin_row, bin_key, bin_count)

    def select(self, rows: np.ndarray) -> Rollups:
        """The rows where the boolean mask ``rows`` is true."""
        index = np.full(len(self), -1, np.int64)
        index[rows] = np.arange(int(rows.sum()))
        keep = rows[self.bin_row]
        return Rollups(self.timestamp_ms[rows], self.count[rows], self.sum[rows], self.minimum[rows],
                       self.maximum[rows], self.sketched[rows], index[self.bin_row[keep]], self.bin_key[keep],
                       self.bin_count[keep])

    def roll(self, origin_ms: int, period_ms: int) -> Rollups:
        """One row per period [origin + k * period, origin + (k + 1) * period) that holds rows."""
        if not len(self):
            return self
        slot = (self.timestamp_ms - origin_ms) // period_ms
        if len(slot) < 2 or bool(np.all(slot[1:] != slot[:-1])):  # a row per period already
            return Rollups(origin_ms + slot * period_ms, self.count, self.sum, self.minimum, self.maximum,
                           self.sketched, self.bin_row, self.bin_key, self.bin_count)
        starts = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]])
        group = np.cumsum(np.r_[False, slot[1:] != slot[:-1]])
        sketched = np.logical_and.reduceat(self.sketched, starts)
        bin_row = group[self.bin_row]
        keep = sketched[bin_row]
        bin_row, bin_key, bin_count = bin_row[keep], self.bin_key[keep], self.bin_count[keep]
        if len(bin_row):
            order = np.lexsort((bin_key, bin_row))
            bin_row, bin_key, bin_count = bin_row[order], bin_key[order], bin_count[order]
            first = np.flatnonzero(np.r_[True, (bin_row[1:] != bin_row[:-1]) | (bin_key[1:] != bin_key[:-1])])
            bin_row, bin_key, bin_count = bin_row[first], bin_key[first], np.add.reduceat(bin_count, first)
        return Rollups(
            origin_ms + slot[starts] * period_ms,
            np.add.reduceat(self.count, starts),
            np.add.reduceat(self.sum, starts),
            np.minimum.reduceat(self.minimum, starts),
            np.maximum.reduceat(self.maximum, starts),
            sketched, bin_row, bin_key, bin_count,
        )

    def quantiles(self, q: float) -> np.ndarray:
        """Each row's ``q`` quantile (0 <= q <= 1) from its sketch; NaN for rows without one."""
        out = np.full(len(self), np.nan)
        if not len(self.bin_row):
            return out
        cumulative = np.cumsum(self.bin_count)
        totals = np.bincount(self.bin_row, self.bin_count, minlength=len(self))
        before = np.cumsum(totals) - totals
        rows = np.flatnonzero(self.sketched & (totals > 0))
        index = np.searchsorted(cumulative, before[rows] + q * (totals[rows] - 1), side="right")
        # Within the row's own bins: with fractional counts the rank can fall before them (a row
        # under 1 in all), or rounding in the running sums can put it in the previous row's.
        index = np.clip(index, np.searchsorted(self.bin_row, rows), np.searchsorted(self.bin_row, rows, "right") - 1)
        out[rows] = bin_values(self.bin_key[index])
        return out

    def sketches(self) -> list[bytes | None]:
        """Each row's sketch as stored (None for rows without percentiles)."""
        bounds = np.searchsorted(self.bin_row, np.arange(len(self) + 1))
        return [encode(self.bin_key[bounds[row]:bounds[row + 1]], self.bin_count[bounds[row]:bounds[row + 1]])
                if self.sketched[row] else None for row in range(len(self))]


def encode(bin_keys: np.ndarray, counts: np.ndarray) -> bytes:
    """Sorted keys as steps and counts, each in the narrowest unsigned type that holds them."""
    steps = np.diff(bin_keys)
    step_width = _width(steps)
    whole = len(counts) and bool(np.all(counts == np.floor(counts))) and counts.max() < 2**32
    count_width = _width(counts.astype(np.int64)) if whole else 3
    first = int(bin_keys[0]) if len(bin_keys) else 0
    counts_bytes = counts.astype(_UINTS[count_width]).tobytes() if count_width < 3 else counts.astype(np.float64).tobytes()
    return _BLOB.pack(len(bin_keys), first, step_width, count_width) + \
        steps.astype(_UINTS[step_width]).tobytes() + counts_bytes


def _width(values: np.ndarray) -> int:
    high = int(values.max()) if len(values) else 0
    return 0 if high < 2**8 else 1 if high < 2**16 else 2


def concat(parts: list[Rollups]) -> Rollups:
    """The rows of several Rollups together, sorted by time (stable)."""
    parts = [part for part in parts if len(part)]
    if not parts:
        return Rollups.empty()
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [len(part) for part in parts])
    stamps = np.concatenate([part.timestamp_ms for part in parts])
    order = np.argsort(stamps, kind="stable")
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order))
    bin_row = position[np.concatenate([part.bin_row + offset for part, offset in zip(parts, offsets, strict=False)])]
    bin_key = np.concatenate([part.bin_key for part in parts])
    bin_count = np.concatenate([part.bin_count for part in parts])
    by_row = np.lexsort((bin_key, bin_row))

    def column(name: str) -> np.ndarray:
        return np.concatenate([getattr(part, name) for part in parts])[order]

    return Rollups(stamps[order], column("count"), column("sum"), column("minimum"), column("maximum"),
                   column("sketched"), bin_row[by_row], bin_key[by_row], bin_count[by_row])
