"""A sealed chunk's overview: of each block of :data:`BLOCK` consecutive points, the first, the
last, the lowest and the highest finite ones, and the first NaN, +Infinity and -Infinity.

A chart of a million points draws a few points a pixel, and each pixel's are exactly such
representatives of the points it covers (:func:`trainmon.read.downsample.keep`). When a pixel
covers many blocks, the representatives of its blocks hold its own: its lowest point is the
lowest of its blocks' lowest, and so on, so the chart drawn from the overviews alone is the chart
drawn from every point, save that a block that straddles two pixels gives its extremes to the
pixel each falls in. No spike and no non-finite value is hidden; a pixel's own extreme may
give way to a higher one of a block it shares with a neighbour, a block's time span away at most
(no block spans a pause in the points: :func:`blocks`). Maintenance writes the overview beside each sealed chunk of a job's points
(about a thirtieth of the points); a chart that covers at least :data:`DENSE` points a pixel
reads overviews instead of points, for the chunks wholly in its range. Zooming in reads points.
"""

from __future__ import annotations

import numpy as np

from .. import codec

BLOCK = 128  # the stores' index of chunks without an overview names it too (migration 7 / 6)
DENSE = 4 * BLOCK  # points a pixel from which a chart reads overviews: a pixel spans 4 blocks or more


def representatives(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The indices of each segment's first, last, lowest and highest finite, first NaN, first +inf
    and first -inf points, ascending and each once. ``starts`` are the segments' first indices
    (ascending, the first 0)."""
    ends = np.append(starts[1:], len(values)) - 1
    segment = np.repeat(np.arange(len(starts)), ends - starts + 1)  # each point's, counted from 0
    chosen = [starts, ends]
    finite = np.isfinite(values)
    if finite.any():
        for extreme, fill in ((np.minimum, np.inf), (np.maximum, -np.inf)):
            masked = np.where(finite, values, fill)
            best = extreme.reduceat(masked, starts)
            chosen.append(_first_per_segment(np.flatnonzero((masked == best[segment]) & finite), segment))
    if not finite.all():
        for mask in (np.isnan(values), values == np.inf, values == -np.inf):
            chosen.append(_first_per_segment(np.flatnonzero(mask), segment))
    return np.unique(np.concatenate(chosen))


def _first_per_segment(indices: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """Of ascending ``indices``, the first in each segment."""
    if not len(indices):
        return indices
    return indices[np.flatnonzero(np.diff(segment[indices], prepend=-1))]


def blocks(stamps: np.ndarray) -> np.ndarray:
    """Where the blocks of points at ``stamps`` (ascending) start: every :data:`BLOCK` points, and
    after every pause longer than a block's usual span, so that no block joins points far apart
    in time (a chunk that maintenance merged from several writes' remainders has such pauses)."""
    steps = np.diff(stamps)
    usual = max(float(np.median(steps)), 1.0) * BLOCK if len(steps) else 1.0
    return np.union1d(np.arange(0, len(stamps), BLOCK), np.flatnonzero(steps > usual) + 1)


def of_points(columns: list[np.ndarray]) -> bytes:
    """The overview of a chunk's points (times, values, log positions, in time order), sealed."""
    kept = representatives(columns[1], blocks(columns[0]))
    return codec.seal([column[kept] for column in columns])
