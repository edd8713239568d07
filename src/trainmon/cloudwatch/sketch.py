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
# A stored sketch (Rollups.sketches writes them, Rollups.from_stored reads them): a header (_HEADER:
# the number of bins, the first key other than zero's, how the keys and the counts are written),
# then the keys, then the counts. Zero's bin (ZERO_KEY), if any, is flagged in the header, so that
# the other keys are written apart from its far-off key: from the first one (in the header) on,
# either as steps in the narrowest unsigned type that holds them, or, where fewer bytes, as a
# bitmap of every key from the first one on. Zero's count comes after the keys, in the narrowest
# unsigned type that holds it (float64 if not whole; its code in the counts byte's upper half); the
# others' counts last, half a byte each where all are whole and under 16, else in the narrowest
# unsigned type, else float64. Sketches stored before zero's flag, bitmaps and half bytes are the
# same header with steps from zero's key, and read the same way (a trainmon from before reads none
# of the new ones, and refuses the store, whose schema is newer).
# bins, first key, how the keys are written, how the counts are (zero's: above)
_HEADER = np.dtype([("size", "<u4"), ("first", "<i4"), ("keys", "u1"), ("counts", "u1")])
_HEADER_BYTES = _HEADER.itemsize
_UINTS = (np.uint8, np.uint16, np.uint32)
_STEP_SIZES = np.array([1, 2, 4])  # bytes of a key step of each width (keys codes 0, 1, 2)
_BITMAP = 3  # keys code: a bit for each key from the first on
_ZERO = 0x10  # keys flag: the first bin is zero's (ZERO_KEY), its count apart; the keys are the others'
_COUNT_SIZES = np.array([1, 2, 4, 8, 0])  # bytes of a count of each code (3: float64, 4: half a byte)
_NIBBLES = 4  # counts code: whole counts under 16, two a byte (the lower half first)


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
                       value: np.ndarray, *, sketches: bool = True) -> tuple[Rollups, np.ndarray]:
        """``from_samples(...).roll_groups(groups, period_ms)``, without a row per datapoint on the
        way: what a write makes of its datapoints (sorted by group, then time), each one counted in
        a bin of its period's row once. Without ``sketches``, the rows have none (as stored rows
        read without them: no percentiles)."""
        slot = timestamp_ms // period_ms
        apart = (slot[1:] != slot[:-1]) | (groups[1:] != groups[:-1])
        starts = np.flatnonzero(np.r_[True, apart])
        if not sketches:
            return cls(slot[starts] * period_ms, np.add.reduceat(count, starts), np.add.reduceat(total, starts),
                       np.minimum.reduceat(minimum, starts), np.maximum.reduceat(maximum, starts),
                       np.zeros(len(starts), bool), *_no_bins()), groups[starts]
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
        """Rows read back from the store, their sketches as :meth:`sketches` wrote them: all decoded
        together (a write reads back hundreds), their bytes joined and cut up by numpy, a few
        operations for each way of writing keys and counts found."""
        sketched = np.array([blob is not None for blob in sketches], bool)
        blobs = [blob for blob in sketches if blob is not None]
        if not blobs:
            return cls(timestamp_ms, count, total, minimum, maximum, sketched, *_no_bins())
        rows = np.flatnonzero(sketched)
        data = np.frombuffer(b"".join(blobs), np.uint8)
        lengths = np.fromiter(map(len, blobs), np.int64, len(blobs))
        offsets = np.cumsum(lengths) - lengths
        header = data[offsets[:, None] + np.arange(_HEADER_BYTES)].view(_HEADER)[:, 0]
        sizes = header["size"].astype(np.int64)
        codes = header["keys"].astype(np.int64) * 256 + header["counts"]
        bin_key, bin_count = np.empty(int(sizes.sum()), np.int64), np.empty(int(sizes.sum()))
        placed = np.cumsum(sizes) - sizes  # each row's first bin: rows in order, each one's bins sorted by key
        for code in np.unique(codes[sizes > 0]).tolist():
            members = np.flatnonzero((codes == code) & (sizes > 0))
            slots = _ranges(placed[members], sizes[members])
            bin_key[slots], bin_count[slots] = _decoded(data, offsets[members], lengths[members], sizes[members],
                                                        header["first"][members].astype(np.int64), code // 256,
                                                        code % 256)
        return cls(timestamp_ms, count, total, minimum, maximum, sketched, np.repeat(rows, sizes), bin_key, bin_count)

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
        """Each row's sketch as stored (None for rows without percentiles; the form is described
        above _HEADER), made for all rows together (a write stores hundreds) in one buffer that
        numpy fills, a few operations for each way of writing keys and counts found, then cut up."""
        rows = np.flatnonzero(self.sketched)
        bounds = np.searchsorted(self.bin_row, np.arange(len(self) + 1))
        size = np.diff(bounds)[rows]
        begin = bounds[:-1][rows]  # each sketched row's first bin
        keys, counts = self.bin_key, self.bin_count
        zero = np.zeros(len(rows), bool)
        zero[size > 0] = keys[begin[size > 0]] == ZERO_KEY
        others = size - zero  # bins of keys other than zero's
        first, last = np.zeros(len(rows), np.int64), np.zeros(len(rows), np.int64)
        first[others > 0] = keys[(begin + zero)[others > 0]]
        last[others > 0] = keys[(begin + size - 1)[others > 0]]
        # the keys after each row's first other one, as steps from the key before
        stepped = np.ones(len(keys), bool)
        stepped[(begin + zero)[others > 0]] = False
        stepped[begin[zero]] = False
        steps = np.diff(keys, prepend=0)
        steps[~stepped] = 0
        step_width = _widths(_per_row(np.maximum, steps, bounds, 0)[rows])
        step_bytes = np.maximum(others - 1, 0) * _STEP_SIZES[step_width]
        bitmap_bytes = (last - first + 8) // 8 * (others > 0)
        key_code = np.where(bitmap_bytes < step_bytes, _BITMAP, step_width)
        key_bytes = np.where(key_code == _BITMAP, bitmap_bytes, step_bytes)
        is_zero = keys == ZERO_KEY  # (zero's count is written apart, in a code of its own)
        whole = _per_row(np.logical_and, (counts == np.floor(counts)) | is_zero, bounds, True)[rows]
        high = _per_row(np.maximum, np.where(is_zero, 0.0, counts), bounds, 0.0)[rows]
        count_code = np.where(whole & (high < 16), _NIBBLES, _count_codes(whole, high))
        other_bytes = np.where(count_code == _NIBBLES, (others + 1) // 2, others * _COUNT_SIZES[count_code])
        zero_count = np.where(zero, counts[np.where(zero, begin, 0)] if len(counts) else 0.0, 0.0)
        zero_code = _count_codes(zero_count == np.floor(zero_count), zero_count) * zero  # (none: 0)
        zero_bytes = _COUNT_SIZES[zero_code] * zero
        ends = np.cumsum(_HEADER_BYTES + key_bytes + zero_bytes + other_bytes)
        starts = ends - (_HEADER_BYTES + key_bytes + zero_bytes + other_bytes)
        out = np.zeros(int(ends[-1]) if len(ends) else 0, np.uint8)
        header = np.empty(len(rows), _HEADER)
        header["size"], header["first"] = size, first
        header["keys"], header["counts"] = key_code + np.where(zero, _ZERO, 0), count_code + zero_code * 16
        out[starts[:, None] + np.arange(_HEADER_BYTES)] = header.view(np.uint8).reshape(-1, _HEADER_BYTES)
        key_start = starts + _HEADER_BYTES
        zero_start = key_start + key_bytes
        count_start = zero_start + zero_bytes
        for code in np.unique(key_code[others > 1]).tolist():  # (a row of one other key has it in the header)
            members = (key_code == code) & (others > 1)
            mine = _ranges(begin[members] + zero[members] + 1, others[members] - 1)
            if code == _BITMAP:  # every member's bits one after the other, packed at once
                bits_before = np.cumsum(key_bytes[members] * 8) - key_bytes[members] * 8
                bits = np.zeros(int(key_bytes[members].sum()) * 8, np.uint8)
                bits[bits_before] = 1  # each first key's own bit
                bits[keys[mine] - np.repeat(first[members] - bits_before, others[members] - 1)] = 1
                out[_ranges(key_start[members], key_bytes[members])] = np.packbits(bits, bitorder="little")
            else:
                out[_ranges(key_start[members], key_bytes[members])] = steps[mine].astype(_UINTS[code]).view(np.uint8)
        for code in np.unique(zero_code[zero]).tolist():
            members = zero & (zero_code == code)
            out[_ranges(zero_start[members], zero_bytes[members])] = \
                zero_count[members].astype(_count_type(code)).view(np.uint8)
        for code in np.unique(count_code[others > 0]).tolist():
            members = (count_code == code) & (others > 0)
            mine = _ranges(begin[members] + zero[members], others[members])
            if code == _NIBBLES:  # every member's halves one after the other (each row's an even number)
                halves = np.zeros(int(other_bytes[members].sum()) * 2, np.uint8)
                halves[_ranges(2 * (np.cumsum(other_bytes[members]) - other_bytes[members]), others[members])] = \
                    counts[mine]
                out[_ranges(count_start[members], other_bytes[members])] = halves[0::2] | halves[1::2] << 4
            else:
                count_type = _count_type(code)
                out[_ranges(count_start[members], other_bytes[members])] = \
                    counts[mine].astype(count_type).view(np.uint8)
        data = out.tobytes()
        found: list[bytes | None] = [None] * len(self)
        for row, start, end in zip(rows.tolist(), starts.tolist(), ends.tolist(), strict=True):
            found[row] = data[start:end]
        return found


def _count_type(code: int) -> type[np.generic]:
    """The type of counts written with ``code`` (0 to 2: unsigned integers, 3: float64)."""
    return _UINTS[code] if code < 3 else np.float64


def _count_codes(whole: np.ndarray, highs: np.ndarray) -> np.ndarray:
    """Per row, how its counts are written, from whether they are whole and the highest: the narrowest
    unsigned type that holds them (0 to 2), or float64 (3)."""
    return np.where(whole & (highs < 2**32), _widths(highs), 3)


def _widths(highs: np.ndarray) -> np.ndarray:
    """Per row, from its highest value, the narrowest unsigned type that holds it (an index of _UINTS)."""
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


def _decoded(data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, sizes: np.ndarray, firsts: np.ndarray,
             key_code: int, count_code: int) -> tuple[np.ndarray, np.ndarray]:
    """The bins (keys and counts, row after row) of sketches written one way (``key_code``, with its zero flag,
    and ``count_code``, with zero's in its upper half), stored at ``offsets`` in ``data`` (all
    sketches' bytes), ``lengths`` bytes each, each of ``sizes`` bins."""
    zero = int(bool(key_code & _ZERO))
    key_code &= ~_ZERO
    zero_code, count_code = count_code >> 4, count_code & 15
    others = sizes - zero
    have = others > 0
    count_bytes = (others + 1) // 2 if count_code == _NIBBLES else others * _COUNT_SIZES[count_code]
    count_start = offsets + lengths - count_bytes
    if count_code == _NIBBLES:
        halves = data[_ranges(count_start, count_bytes)]
        pairs = np.stack([halves & 15, halves >> 4], axis=1).reshape(-1)
        kept = _ranges(2 * (np.cumsum(count_bytes) - count_bytes), others)  # (an odd row's last half is padding)
        other_counts = pairs[kept].astype(np.float64)
    else:
        count_type = _count_type(count_code)
        other_counts = data[_ranges(count_start, count_bytes)].view(count_type).astype(np.float64)
    zero_bytes = int(_COUNT_SIZES[zero_code]) * zero
    if zero:
        zero_type = _count_type(zero_code)
        zero_counts = data[_ranges(count_start - zero_bytes, np.full(len(sizes), zero_bytes))].view(zero_type)
    if key_code == _BITMAP:
        key_bytes = count_start - zero_bytes - offsets - _HEADER_BYTES
        bits = np.unpackbits(data[_ranges(offsets + _HEADER_BYTES, key_bytes)], bitorder="little")
        set_bits = np.flatnonzero(bits)
        row_start = np.cumsum(key_bytes * 8) - key_bytes * 8  # each row's first bit among ``bits``
        row_of = np.searchsorted(row_start, set_bits, side="right") - 1
        other_keys = firsts[row_of] + (set_bits - row_start[row_of])
    else:
        step_type = _UINTS[key_code]
        step_bytes = np.maximum(others - 1, 0) * np.dtype(step_type).itemsize
        steps = data[_ranges(offsets + _HEADER_BYTES, step_bytes)].view(step_type)
        starts = np.cumsum(others) - others
        increments = np.empty(int(others.sum()), np.int64)
        not_first = np.ones(len(increments), bool)
        not_first[starts[have]] = False
        increments[not_first] = steps
        increments[starts[have]] = firsts[have]
        running = np.cumsum(increments)
        other_keys = running - np.repeat(running[starts[have]] - increments[starts[have]], others[have])
    keys = np.full(int(sizes.sum()), ZERO_KEY, np.int64)
    counts = np.empty(int(sizes.sum()))
    placed = _ranges(np.cumsum(sizes) - sizes + zero, others)
    keys[placed], counts[placed] = other_keys, other_counts
    if zero:
        counts[np.cumsum(sizes) - sizes] = zero_counts
    return keys, counts


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
