"""Charts as inline SVG, drawn here (pure): series in, markup out; no script, no font, no request.

A series of any length is drawn from at most a few points per pixel: :func:`trainmon.read.downsample.keep`
keeps each pixel's first, last, lowest and highest points and its first NaN and infinities, so a
spike or a NaN of a 10-hour profile stays in sight while the file stays small. Lines break where a
value is not finite; a NaN or an infinity is drawn as a mark on the top (or bottom) edge. Rule
findings are marked by a vertical line with a flag (their message as the tooltip), periods (a
CPU bottleneck) as shaded bands. Every chart of a report shares the job's time axis, in time
since the job started.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np

from ..read.downsample import keep
from .text import elapsed, quantity

WIDTH, HEIGHT = 900, 230
LEFT, RIGHT, TOP, BOTTOM = 70, 14, 14, 30
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
COLORS = 8  # series classes s0..s7 (the page's style gives their colours)
_TIME_STEPS_S = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
                 86400, 172800, 604800)
MAX_TICKS = 12  # of each axis; the steps chosen give at most 9
LIMIT = 2.0**1020  # the value axis stops here (about 1e307): its span stays finite (beyond: on the edge)
FLAT = 1e-9  # a range smaller than this share of its values' size is drawn as one value
TINY = 1e-300  # below this a span or a step is zero (no tick divides it)
SAFE_SPAN_MS = 2**52  # a time axis wider (142,000 years: a reading stamped at the ends of time) is bucketed coarser


@dataclass(frozen=True)
class Line:
    """A series to draw: epoch ms (ascending) and values."""

    label: str
    stamps_ms: np.ndarray
    values: np.ndarray


@dataclass(frozen=True)
class Marker:
    """A moment to mark (a rule's finding), with its tooltip, and the value it is about when known."""

    time_ms: int
    text: str
    value: float | None = None


@dataclass(frozen=True)
class Band:
    """A stretch of time to shade; ``kind`` is its style (``cpu``, ``io``)."""

    start_ms: int
    end_ms: int
    kind: str
    text: str


@dataclass(frozen=True)
class _Scale:
    start_ms: int
    end_ms: int
    low: float
    high: float

    def x(self, stamps: np.ndarray) -> np.ndarray:
        span = max(self.end_ms - self.start_ms, 1)
        with np.errstate(all="ignore"):
            x = LEFT + (stamps.astype(np.float64) - self.start_ms) * (PLOT_W / span)
        return np.clip(np.nan_to_num(x, nan=LEFT), LEFT - 1, LEFT + PLOT_W + 1)

    def y(self, values: np.ndarray) -> np.ndarray:
        """Pixels of ``values``; one beyond the axis (the axis stops at ±LIMIT) on its edge."""
        with np.errstate(all="ignore"):
            y = TOP + (self.high - np.asarray(values, np.float64)) * (PLOT_H / (self.high - self.low))
        return np.clip(np.nan_to_num(y, nan=TOP + PLOT_H), TOP, TOP + PLOT_H)


def chart(title: str, lines: Sequence[Line], *, start_ms: int, end_ms: int, unit: str | None = None,
          markers: Sequence[Marker] = (), bands: Sequence[Band] = (), note: str = "", kind: str = "") -> str:
    """A ``<figure>``: the title, the SVG and a legend; a chart with no point says so instead."""
    end_ms = max(end_ms, start_ms + 1)
    drawn = [_kept(line, start_ms, end_ms) for line in lines]
    drawn = [line for line in drawn if len(line.stamps_ms)]
    caption = f"<figcaption>{escape(title)}</figcaption>"
    if not drawn and not markers:
        return (f'<figure class="chart empty" data-kind="{escape(kind)}">{caption}'
                f'<p class="note">No data to draw{": " + escape(note) if note else "."}</p></figure>')
    scale = _Scale(start_ms, end_ms, *_value_range(drawn, markers, unit))
    parts = [f'<svg class="plot" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="{escape(title)}" data-series="{len(drawn)}" data-points="{sum(len(d.stamps_ms) for d in drawn)}">',
             _grid(scale, unit)]
    parts += [_band(band, scale) for band in bands]
    parts += [_series(line, index % COLORS, scale) for index, line in enumerate(drawn)]
    parts += [_marker(marker, scale) for marker in markers]
    parts.append("</svg>")
    legend = "".join(f'<span class="key s{i % COLORS}">{escape(line.label)}</span>' for i, line in enumerate(drawn))
    legend += "".join(f'<span class="key band-{escape(kind)}">{escape(label)}</span>'
                      for kind, label in dict.fromkeys((b.kind, _band_label(b)) for b in bands))
    if any(not np.isfinite(line.values).all() for line in drawn):
        legend += '<span class="key nonfinite">NaN or infinite value (on the edge)</span>'
    if markers:
        legend += '<span class="key flag">rule finding</span>'
    footer = f'<p class="note">{escape(note)}</p>' if note else ""
    return (f'<figure class="chart" data-kind="{escape(kind)}">{caption}{"".join(parts)}'
            f'<div class="legend">{legend}</div>{footer}</figure>')


def _band_label(band: Band) -> str:
    return band.text.split(":", 1)[0]


def _kept(line: Line, start_ms: int, end_ms: int) -> Line:
    """The line's points inside the time axis, downsampled to the plot's pixels."""
    stamps, values = line.stamps_ms, line.values
    if len(stamps) and (stamps[0] < start_ms or stamps[-1] > end_ms):
        inside = (stamps >= start_ms) & (stamps <= end_ms)
        stamps, values = stamps[inside], values[inside]
    span = end_ms + 1 - start_ms
    if span <= SAFE_SPAN_MS:
        index = keep(stamps, values, PLOT_W, start_ms, end_ms + 1)
    else:  # readings stamped ages apart: bucketed in coarser units, keep()'s arithmetic stays within int64
        unit = span / SAFE_SPAN_MS
        coarse = ((stamps.astype(np.float64) - start_ms) / unit).astype(np.int64)
        index = keep(coarse, values, PLOT_W, 0, SAFE_SPAN_MS)
    return Line(line.label, stamps[index], values[index])


def _value_range(lines: Sequence[Line], markers: Sequence[Marker], unit: str | None) -> tuple[float, float]:
    """The value axis: finite, never flat (a range within :data:`FLAT` of its size is padded) and
    within ±:data:`LIMIT`, so its span and every tick are ordinary floats."""
    finite = [line.values[np.isfinite(line.values)] for line in lines]
    values = np.concatenate(finite) if finite else np.empty(0)
    marked = [m.value for m in markers if m.value is not None and math.isfinite(m.value)]
    if marked:
        values = np.concatenate((values, np.asarray(marked, dtype=np.float64)))
    if not len(values):
        return 0.0, 1.0
    low = min(max(float(values.min()), -LIMIT), LIMIT)
    high = min(max(float(values.max()), -LIMIT), LIMIT)
    if unit == "Percent" and low >= 0 and high <= 100:
        return 0.0, 100.0
    if low >= 0 and high > 0 and low < 0.25 * high:
        low = 0.0
    size = max(abs(low), abs(high))
    if high - low <= FLAT * size or high - low < TINY:  # one value (to the last bits): a band around it
        pad = size * 0.1 if size >= TINY else 1.0
        return low - pad, high + pad
    pad = (high - low) * 0.05
    return (low if low == 0 else low - pad), high + pad


def _nice_step(span: float, count: int) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving at most ``count`` steps over
    ``span``; 0.0 when ``span`` is no ordinary positive number (no ticks then)."""
    raw = span / count
    if not math.isfinite(raw) or raw < TINY:
        return 0.0
    magnitude = 10.0 ** min(max(math.floor(math.log10(raw)), -300), 300)
    return float(next((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), raw))


def _time_step(span_s: float) -> float:
    """The time axis' step: a round one of :data:`_TIME_STEPS_S` giving at most 8 steps, else
    whole weeks (an axis of years, from a reading stamped far from the job)."""
    found = next((s for s in _TIME_STEPS_S if span_s / s <= 8), None)
    if found is not None:
        return found
    weeks = span_s / 8 / _TIME_STEPS_S[-1]
    return _TIME_STEPS_S[-1] * float(math.ceil(weeks)) if math.isfinite(weeks) else math.inf


def _grid(scale: _Scale, unit: str | None) -> str:
    """Axes, value ticks and time ticks (time since the job started). Ticks are counted by an
    integer index, at most :data:`MAX_TICKS` of each: a float that stops moving cannot hold a loop."""
    out = [f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}"/>']
    step = _nice_step(scale.high - scale.low, 4)
    first = scale.low / step if step > 0 else math.nan
    if math.isfinite(first):
        base = math.ceil(first)
        for index in range(MAX_TICKS):
            tick = (base + index) * step
            if tick > scale.high + step * 1e-9:
                break
            y = float(scale.y(np.asarray([tick]))[0])
            out.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + PLOT_W}" y1="{y:.1f}" y2="{y:.1f}"/>'
                       f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                       f'{escape(quantity(tick, unit, short=True))}</text>')
    span_s = (scale.end_ms - scale.start_ms) / 1000
    every_s = _time_step(span_s)
    for index in range(MAX_TICKS if math.isfinite(every_s) else 1):
        moment = index * every_s
        if moment > span_s + 1e-9:
            break
        x = float(scale.x(np.asarray([scale.start_ms + moment * 1000]))[0])
        anchor = "end" if x > WIDTH - RIGHT - 30 else "middle"  # the last label stays inside the picture
        out.append(f'<line class="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP + PLOT_H}" y2="{TOP + PLOT_H + 4}"/>'
                   f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 10}" text-anchor="{anchor}">'
                   f'{escape(elapsed(moment, every_s < 1))}</text>')
    return "".join(out)


def _series(line: Line, color: int, scale: _Scale) -> str:
    finite = np.isfinite(line.values)
    xs = scale.x(line.stamps_ms)
    ys = scale.y(np.where(finite, line.values, 0.0))
    starts = finite & ~np.concatenate(([False], finite[:-1]))  # a run of finite points begins here
    d = "".join(f"{'M' if s else 'L'}{x:.1f} {y:.1f}" for x, y, s, f in
                zip(xs.tolist(), ys.tolist(), starts.tolist(), finite.tolist(), strict=True) if f)
    if finite.sum() == 1:  # a lone point draws nothing as a path: give it a dot
        index = int(np.flatnonzero(finite)[0])
        d += f"M{xs[index] - 1.5:.1f} {ys[index]:.1f}h3"
    out = [f'<path class="series s{color}" d="{d}"><title>{escape(line.label)}</title></path>'] if d else []
    for index in np.flatnonzero(~finite).tolist():
        value = float(line.values[index])
        y = TOP + PLOT_H - 3 if value == -math.inf else TOP + 3
        word = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        out.append(f'<circle class="nonfinite s{color}" cx="{xs[index]:.1f}" cy="{y}" r="3.5">'
                   f'<title>{escape(line.label)} = {word}</title></circle>')
    return "".join(out)


def _marker(marker: Marker, scale: _Scale) -> str:
    x = float(scale.x(np.asarray([marker.time_ms]))[0])
    x = min(max(x, LEFT), LEFT + PLOT_W)
    dot = ""
    if marker.value is not None and math.isfinite(marker.value):
        y = float(scale.y(np.asarray([marker.value]))[0])
        dot = f'<circle class="hit" cx="{x:.1f}" cy="{y:.1f}" r="4"/>'
    return (f'<g class="finding"><title>{escape(marker.text)}</title>'
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + PLOT_H}"/>'
            f'<path class="flag" d="M{x:.1f} {TOP}l7 4l-7 4z"/>{dot}</g>')


def _band(band: Band, scale: _Scale) -> str:
    x0, x1 = (float(v) for v in scale.x(np.asarray([band.start_ms, band.end_ms])))
    x0, x1 = max(x0, LEFT), min(x1, LEFT + PLOT_W)
    if x1 <= x0:
        return ""
    return (f'<rect class="band band-{escape(band.kind)}" x="{x0:.1f}" y="{TOP}" width="{max(x1 - x0, 1.0):.1f}" '
            f'height="{PLOT_H}"><title>{escape(band.text)}</title></rect>')
