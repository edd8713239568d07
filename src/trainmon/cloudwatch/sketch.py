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
_HEADER = np.dtype([("size", "<u4"), ("first", "<i4"), ("step_width", "u1"), ("count_width", "u1")])  # _BLOB's
_UINTS = (np.uint8, np.uint16, np.uint32)
_STEP_SIZES, _COUNT_SIZES = np.array([1, 2, 4]), np.array([1, 2, 4, 8])  # bytes of each width (3: float64)


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
        known = _known(value, minimum, maximum)
        sketched = known >= 0  # (not NaN)
        rows = np.flatnonzero(sketched)
        return cls(timestamp_ms, count, total, minimum, maximum, sketched, rows, keys(known[rows]), count[rows])

    @classmethod
    def rolled_samples(cls, groups: np.ndarray, period_ms: int, timestamp_ms: np.ndarray, count: np.ndarray,
                       total: np.ndarray, minimum: np.ndarray, maximum: np.ndarray,
                       value: np.ndarray) -> tuple[Rollups, np.ndarray]:
        """``from_samples(...).roll_groups(groups, period_ms)``, without a row per datapoint on the
        way: what a write makes of its datapoints (sorted by group, then time), each one counted in
        a bin of its period's row once."""
        slot = timestamp_ms // period_ms
        apart = (slot[1:] != slot[:-1]) | (groups[1:] != groups[:-1])
        starts = np.flatnonzero(np.r_[True, apart])
        known = _known(value, minimum, maximum)
        sketched = np.logical_and.reduceat(known >= 0, starts)  # (NaN: not)
        row = np.cumsum(np.r_[False, apart])
        binned = sketched[row]
        return cls(slot[starts] * period_ms, np.add.reduceat(count, starts), np.add.reduceat(total, starts),
                   np.minimum.reduceat(minimum, starts), np.maximum.reduceat(maximum, starts), sketched,
                   *_summed(row[binned], keys(known[binned]), count[binned])), groups[starts]

    @classmethod
    def from_stored(cls, timestamp_ms: np.ndarray, count: np.ndarray, total: np.ndarray, minimum: np.ndarray,
                    maximum: np.ndarray, sketches: list[bytes | None]) -> Rollups:
        """Rows read back from the store, their sketches as ``encode`` wrote them: all decoded
        together (a write reads back hundreds), their bytes joined and cut up by numpy, a few
        operations for each pair of widths found."""
        sketched = np.array([blob is not None for blob in sketches], bool)
        blobs = [blob for blob in sketches if blob is not None]
        if not blobs:
            return cls(timestamp_ms, count, total, minimum, maximum, sketched, *_no_bins())
        rows = np.flatnonzero(sketched)
        data = np.frombuffer(b"".join(blobs), np.uint8)
        lengths = np.fromiter(map(len, blobs), np.int64, len(blobs))
        offsets = np.cumsum(lengths) - lengths
        header = data[offsets[:, None] + np.arange(_BLOB.size)].view(_HEADER)[:, 0]
        sizes = header["size"].astype(np.int64)
        widths = header["step_width"].astype(np.int64) * 4 + header["count_width"]
        parts = [_no_bins()]
        for pair in np.unique(widths[sizes > 0]).tolist():
            members = np.flatnonzero((widths == pair) & (sizes > 0))
            parts.append(_decoded(data, offsets[members], sizes[members], header["first"][members].astype(np.int64),
                                  pair // 4, pair % 4, rows[members]))
        bin_row, bin_key, bin_count = (np.concatenate(column) for column in zip(*parts, strict=True))
        if len(parts) > 2:
            order = _by_row_and_key(bin_row, bin_key)
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

    def take(self, order: np.ndarray) -> Rollups:
        """The rows in the order ``order`` gives (a permutation of them), each with its bins (moved
        as they are: a row's bins stay sorted by key)."""
        bounds = np.searchsorted(self.bin_row, np.arange(len(self) + 1))
        sizes = np.diff(bounds)[order]
        bins = _ranges(bounds[:-1][order], sizes)
        return Rollups(self.timestamp_ms[order], self.count[order], self.sum[order], self.minimum[order],
                       self.maximum[order], self.sketched[order], np.repeat(np.arange(len(order)), sizes),
                       self.bin_key[bins], self.bin_count[bins])

    def roll(self, origin_ms: int, period_ms: int) -> Rollups:
        """One row per period [origin + k * period, origin + (k + 1) * period) that holds rows."""
        if not len(self):
            return self
        slot = (self.timestamp_ms - origin_ms) // period_ms
        return self._merged(slot[1:] != slot[:-1], origin_ms + slot * period_ms)

    def roll_groups(self, groups: np.ndarray, period_ms: int) -> tuple[Rollups, np.ndarray]:
        """:meth:`roll` (from time 0) of the rows of many series at once: rows sorted by group, then
        time, ``groups`` giving each row's. One row per group and period, and the group of each."""
        if not len(self):
            return self, groups
        slot = self.timestamp_ms // period_ms
        apart = (slot[1:] != slot[:-1]) | (groups[1:] != groups[:-1])
        return self._merged(apart, slot * period_ms), groups[np.r_[True, apart]]

    def _merged(self, apart: np.ndarray, stamps: np.ndarray) -> Rollups:
        """Each run of rows that are not ``apart`` from the row before as one row, stamped with its
        first row's ``stamps``: statistic sets added up, sketches merged (bins added)."""
        if bool(apart.all()):  # a row per period already
            return Rollups(stamps, self.count, self.sum, self.minimum, self.maximum, self.sketched, self.bin_row,
                           self.bin_key, self.bin_count)
        starts = np.flatnonzero(np.r_[True, apart])
        group = np.cumsum(np.r_[False, apart])
        sketched = np.logical_and.reduceat(self.sketched, starts)
        return Rollups(
            stamps[starts],
            np.add.reduceat(self.count, starts),
            np.add.reduceat(self.sum, starts),
            np.minimum.reduceat(self.minimum, starts),
            np.maximum.reduceat(self.maximum, starts),
            sketched, *_added(sketched, group[self.bin_row], self.bin_key, self.bin_count),
        )

    @classmethod
    def placed(cls, rows: Rollups, at: np.ndarray, stamps: np.ndarray) -> Rollups:
        """``rows`` at the indices ``at`` (ascending) of as many rows as ``stamps`` has; the others
        empty, which :meth:`merge` leaves as they are (no count, a sum of -0.0)."""
        size = len(stamps)
        count, total = np.zeros(size), np.full(size, -0.0)
        low, high, sketched = np.full(size, np.inf), np.full(size, -np.inf), np.ones(size, bool)
        count[at], total[at], low[at], high[at], sketched[at] = rows.count, rows.sum, rows.minimum, rows.maximum, \
            rows.sketched
        return cls(stamps, count, total, low, high, sketched, at[rows.bin_row], rows.bin_key, rows.bin_count)

    def merge(self, later: Rollups) -> Rollups:
        """Row by row, these rows with ``later``'s of the same index (the same periods): statistic
        sets added up (these first), sketches merged."""
        sketched = self.sketched & later.sketched
        return Rollups(self.timestamp_ms, self.count + later.count, self.sum + later.sum,
                       np.minimum(self.minimum, later.minimum), np.maximum(self.maximum, later.maximum), sketched,
                       *_added(sketched, np.r_[self.bin_row, later.bin_row], np.r_[self.bin_key, later.bin_key],
                               np.r_[self.bin_count, later.bin_count]))

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
        """Each row's sketch as stored (None for rows without percentiles): what :func:`encode`
        makes of each, made for all rows together (a write stores hundreds) in one buffer that
        numpy fills, a few operations for each pair of widths found, then cut up."""
        bounds = np.searchsorted(self.bin_row, np.arange(len(self) + 1))
        sizes = np.diff(bounds)
        steps = np.diff(self.bin_key, prepend=0)
        steps[bounds[:-1][sizes > 0]] = 0  # a row's first key is written whole, not as a step
        step_width = _widths(_per_row(np.maximum, steps, bounds, 0))
        counts = self.bin_count
        whole = _per_row(np.logical_and, counts == np.floor(counts), bounds, False)
        high = _per_row(np.maximum, counts, bounds, 0.0)
        count_width = np.where(whole & (high < 2**32), _widths(high), 3)
        rows = np.flatnonzero(self.sketched)
        size, first = sizes[rows], np.zeros(len(rows), np.int64)
        first[size > 0] = self.bin_key[bounds[rows][size > 0]]
        step_size, count_size = _STEP_SIZES[step_width[rows]], _COUNT_SIZES[count_width[rows]]
        step_bytes, count_bytes = np.maximum(size - 1, 0) * step_size, size * count_size
        ends = np.cumsum(_BLOB.size + step_bytes + count_bytes)
        starts = ends - (_BLOB.size + step_bytes + count_bytes)
        out = np.empty(int(ends[-1]) if len(ends) else 0, np.uint8)
        header = np.empty(len(rows), _HEADER)
        header["size"], header["first"] = size, first
        header["step_width"], header["count_width"] = step_width[rows], count_width[rows]
        out[starts[:, None] + np.arange(_BLOB.size)] = header.view(np.uint8).reshape(-1, _BLOB.size)
        pairs = step_width[rows] * 4 + count_width[rows]
        for pair in np.unique(pairs).tolist():
            members = pairs == pair
            step_type = _UINTS[pair // 4]
            count_type = _UINTS[pair % 4] if pair % 4 < 3 else np.float64
            mine = rows[members]
            out[_ranges(starts[members] + _BLOB.size, step_bytes[members])] = \
                steps[_ranges(bounds[mine] + 1, np.maximum(size[members] - 1, 0))].astype(step_type).view(np.uint8)
            out[_ranges(starts[members] + _BLOB.size + step_bytes[members], count_bytes[members])] = \
                counts[_ranges(bounds[mine], size[members])].astype(count_type).view(np.uint8)
        data = out.tobytes()
        found: list[bytes | None] = [None] * len(self)
        for row, start, end in zip(rows.tolist(), starts.tolist(), ends.tolist(), strict=True):
            found[row] = data[start:end]
        return found


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


def _widths(highs: np.ndarray) -> np.ndarray:
    """:func:`_width` of many rows, from each one's highest value."""
    return np.where(highs < 2**8, 0, np.where(highs < 2**16, 1, 2))


def _per_row(ufunc: np.ufunc, values: np.ndarray, bounds: np.ndarray, empty: object) -> np.ndarray:
    """``ufunc`` reduced over each row's bins (``bounds``: where each row's begin, and the end);
    ``empty`` for rows without bins."""
    sizes = np.diff(bounds)
    out = np.full(len(sizes), empty, values.dtype)
    filled = sizes > 0
    if filled.any():
        out[filled] = ufunc.reduceat(values, bounds[:-1][filled])
    return out


def _decoded(data: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, firsts: np.ndarray, step_width: int,
             count_width: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bins (row, key, count) of sketches of one pair of widths, stored at ``offsets`` in
    ``data`` (all sketches' bytes), each of ``sizes`` bins."""
    step_type = _UINTS[step_width]
    count_type = _UINTS[count_width] if count_width < 3 else np.float64
    step_bytes = (sizes - 1) * np.dtype(step_type).itemsize
    steps = data[_ranges(offsets + _BLOB.size, step_bytes)].view(step_type)
    counts = data[_ranges(offsets + _BLOB.size + step_bytes, sizes * np.dtype(count_type).itemsize)].view(count_type)
    starts = np.cumsum(sizes) - sizes
    increments = np.empty(int(sizes.sum()), np.int64)
    not_first = np.ones(len(increments), bool)
    not_first[starts] = False
    increments[not_first] = steps
    increments[starts] = firsts
    running = np.cumsum(increments)
    return (np.repeat(rows, sizes), running - np.repeat(running[starts] - increments[starts], sizes),
            counts.astype(np.float64))


def _no_bins() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)


def _ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The indices of several ranges one after the other: ``starts[i]`` up to ``starts[i] + sizes[i]``."""
    offsets = np.cumsum(sizes) - sizes
    return np.repeat(starts - offsets, sizes) + np.arange(int(sizes.sum()))


def _known(value: np.ndarray, minimum: np.ndarray, maximum: np.ndarray) -> np.ndarray:
    """Each datapoint's single value where it is known: a statistic set's (NaN ``value``) only when
    its minimum equals its maximum."""
    if not np.isnan(value).any():
        return value
    return np.where(np.isnan(value) & (minimum == maximum), minimum, value)


def _added(sketched: np.ndarray, bin_row: np.ndarray, bin_key: np.ndarray,
           bin_count: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_summed` of the bins of ``sketched`` rows (the others' left out)."""
    keep = sketched[bin_row]
    return _summed(bin_row[keep], bin_key[keep], bin_count[keep])


_KEY_BITS = 33  # a key, from ZERO_KEY up, fits in the low 33 bits of one sortable integer, its row above


def _summed(bin_row: np.ndarray, bin_key: np.ndarray, bin_count: np.ndarray,
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bins (each with its row) sorted by row and key, those of one row and key added up: one sort
    of one integer; with every count 1 (single values, as most datapoints are) the sorted
    integers alone."""
    if not len(bin_row):
        return bin_row, bin_key, bin_count
    combined = bin_row << _KEY_BITS | (bin_key - ZERO_KEY)
    ones = bool((bin_count == 1).all())
    order = None if ones else np.argsort(combined, kind="stable")
    combined = np.sort(combined, kind="stable") if order is None else combined[order]
    first = np.flatnonzero(np.r_[True, combined[1:] != combined[:-1]])
    counts = np.diff(np.r_[first, len(combined)]).astype(np.float64) if order is None else \
        np.add.reduceat(bin_count[order], first)
    kept = combined[first]
    return kept >> _KEY_BITS, (kept & ((1 << _KEY_BITS) - 1)) + ZERO_KEY, counts


def _by_row_and_key(bin_row: np.ndarray, bin_key: np.ndarray) -> np.ndarray:
    """The order that sorts bins by row, then key (one sort of one integer)."""
    return np.argsort(bin_row << _KEY_BITS | (bin_key - ZERO_KEY), kind="stable")


def concat(parts: list[Rollups]) -> Rollups:
    """The rows of several Rollups together, sorted by time (stable)."""
    parts = [part for part in parts if len(part)]
    if not parts:
        return Rollups.empty()
    if len(parts) == 1:
        return parts[0]
    joined = join(parts)
    return joined.take(np.argsort(joined.timestamp_ms, kind="stable"))


def join(parts: list[Rollups]) -> Rollups:
    """The rows of several Rollups one after the other, as they are."""
    offsets = np.cumsum([0] + [len(part) for part in parts])

    def column(name: str) -> np.ndarray:
        return np.concatenate([getattr(part, name) for part in parts])

    return Rollups(column("timestamp_ms"), column("count"), column("sum"), column("minimum"), column("maximum"),
                   column("sketched"),
                   np.concatenate([part.bin_row + offset for part, offset in zip(parts, offsets, strict=False)]),
                   column("bin_key"), column("bin_count"))
