"""Points for a chart ``width`` pixels wide: of each pixel's points, the first, the last, the lowest
and the highest finite ones, and the first NaN, +Infinity and -Infinity, so no spike and no
non-finite value is ever hidden, however many points a series holds. The points kept are real
points (each still knows the log record it came from), in time order."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..store.series.overview import representatives

MAX_WIDTH = 10_000


def keep(stamps: np.ndarray, values: np.ndarray, width: int, start_ms: int | None = None,
         end_ms: int | None = None) -> np.ndarray:
    """The indices to draw of points sorted by ``stamps``, over ``width`` buckets of equal time
    between ``start_ms`` and ``end_ms`` (default: the first and the last point)."""
    count = len(stamps)
    if count <= 4 * width:
        return np.arange(count)
    low = int(stamps[0]) if start_ms is None else start_ms
    high = int(stamps[-1]) + 1 if end_ms is None else end_ms
    span = max(high - low, 1)
    if span <= (2**62) // width:  # exact in integers
        bucket = np.clip((stamps - low) * width // span, 0, width - 1)
    else:  # times thousands of years apart: in floats, where (stamps - low) * width would overflow
        offsets = stamps.astype(np.float64) - float(low)
        bucket = np.clip(np.floor(offsets * (width / float(span))), 0, width - 1).astype(np.int64)
    return representatives(values, np.flatnonzero(np.diff(bucket, prepend=-1)))  # from each non-empty bucket's first


DISPLAY_STEPS = 2**20  # values are shown to a millionth of the range they span


def for_display(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to the decimal place that keeps a millionth of their span (of their
    size, when they are all one value): no chart could draw the difference, and the text is half
    as long. Zooming in asks again, so the rounding follows the range shown."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        return values
    low, high = float(finite.min()), float(finite.max())
    scale = (high - low) or max(abs(low), abs(high))
    if scale == 0:
        return values
    decimals = int(np.ceil(-np.log10(scale / DISPLAY_STEPS)))
    return np.round(values, decimals) if decimals < 300 else values


def chart_payload(stamps: np.ndarray, values: np.ndarray, *, deltas: bool = False) -> dict[str, Any]:
    """Times (epoch ms) and values for a chart: a non-finite value is null in ``Values``, and named
    in ``NonFinite`` (by position). With ``deltas``, the times go as ``TimestampDeltas`` (the first,
    then each one's difference from the one before), which compress to half of ``Timestamps``."""
    finite = np.isfinite(values)
    shown: list[float | None] = values.tolist()
    special: dict[str, str] = {}
    if not finite.all():
        for index in np.flatnonzero(~finite).tolist():
            value = shown[index]
            assert value is not None
            special[str(index)] = "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
            shown[index] = None
    times = {"TimestampDeltas": np.diff(stamps, prepend=0).tolist()} if deltas else {"Timestamps": stamps.tolist()}
    return {**times, "Values": shown, "NonFinite": special}


def chart(stamps: np.ndarray, values: np.ndarray, width: int, start_ms: int | None = None,
          end_ms: int | None = None, *, count: int | None = None, deltas: bool = False,
          ) -> tuple[np.ndarray, dict[str, Any]]:
    """A chart's answer for points sorted by time: the indices kept (:func:`keep`) and ``Count``
    (``count``: the points these stand for, by default as many as they are), the times (as
    :func:`chart_payload` says), ``Values`` (:func:`for_display`) and ``NonFinite`` of those points."""
    kept = keep(stamps, values, width, start_ms, end_ms)
    return kept, {"Count": len(stamps) if count is None else count,
                  **chart_payload(stamps[kept], for_display(values[kept]), deltas=deltas)}
