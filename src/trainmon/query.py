"""Statistics per period over a job's points (pure: plain values in, plain values out)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from .store import PointRow


@dataclass(frozen=True, slots=True)
class PeriodRow:
    name: str
    start_ms: int
    count: int        # every point, NaN and infinities included
    finite: int       # the points the statistics use
    average: float | None
    minimum: float | None
    maximum: float | None
    last: float       # the last value as emitted (may be NaN or infinite)


def period_table(points: Iterable[PointRow], period_s: int) -> list[PeriodRow]:
    """One row per metric and period holding at least one point, ordered by metric then time."""
    if period_s < 1:
        raise ValueError("period must be at least 1 second")
    period_ms = period_s * 1000
    buckets: dict[tuple[str, int], list[float]] = {}
    for point in points:
        start = point.timestamp_ms - point.timestamp_ms % period_ms
        buckets.setdefault((point.name, start), []).append(point.value)
    rows = []
    for (name, start), values in sorted(buckets.items()):
        finite = [v for v in values if math.isfinite(v)]
        rows.append(PeriodRow(
            name, start, len(values), len(finite),
            sum(finite) / len(finite) if finite else None,
            min(finite) if finite else None,
            max(finite) if finite else None,
            values[-1],
        ))
    return rows


def auto_period_s(first_ms: int, last_ms: int, rows_wanted: int = 20) -> int:
    """A round period giving about ``rows_wanted`` rows over the span."""
    span_s = max(1.0, (last_ms - first_ms) / 1000)
    for period in (1, 5, 10, 20, 30, 60, 300, 600, 1800, 3600, 21600, 86400):
        if span_s / period <= rows_wanted:
            return period
    return 86400
