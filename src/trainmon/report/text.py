"""Numbers, units and times as the report writes them (pure)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from ..units import byte_text

UNIT_NAMES = {"Percent": "percent", "Bytes": "bytes", "Bytes/Second": "bytes/second", "Count": "count",
              "Seconds": "seconds", "None": ""}


def number(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}" if abs(value) >= 1e-3 else f"{value:.3g}"


def quantity(value: float | None, unit: str | None, *, short: bool = False) -> str:
    """A value in its unit: ``42.5%``, ``1.50 GiB``, ``3.2 MiB/s``, ``0.25 s``; plain without one."""
    if value is None or not math.isfinite(value) or unit in (None, "None", "Count", ""):
        return number(value)
    if unit == "Percent":
        return f"{value:.3g}%" if short else f"{value:.4g}%"
    if unit in ("Bytes", "Bytes/Second"):
        return byte_text(value, unit)
    if unit == "Seconds":
        return seconds(value)
    return f"{number(value)} {unit}"


def seconds(value: float | None) -> str:
    """A duration: ``0.125 s``, ``42.0 s``, ``12 min 5 s``, ``3 h 2 min``."""
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) < 60:
        return f"{value:.3g} s" if abs(value) < 10 else f"{value:.1f} s"
    whole = int(round(value))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {secs} s"


def elapsed(value_s: float, fraction: bool = False) -> str:
    """Time since the job started, for an axis: ``0:00``, ``1:30``, ``2:00:00``; tenths when asked."""
    if fraction:
        return f"{value_s:.1f} s"
    whole = int(round(value_s))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def clock(epoch_s: float | None) -> str:
    """An instant in UTC, to the millisecond."""
    if epoch_s is None:
        return "-"
    try:
        return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    except (ValueError, OverflowError, OSError):  # NaN, or beyond the years a datetime holds
        return f"{number(epoch_s)} s after the epoch"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"
