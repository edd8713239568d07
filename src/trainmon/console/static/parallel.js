// Hyperparameters against a metric, as SVG: parallel coordinates (an axis per hyperparameter and
// one for the metric, a line per job) and a scatter of one hyperparameter against the metric. The
// compare page draws jobs with them, a tuning job's page its trials.
//
// A column is {name, values (one per line, in the lines' order), range?, metric?}: ``range``
// ({min, max, log} or {categories}) fixes its axis, as a tuning job's parameter ranges do; without
// it the axis spans the values. A line is {name, color, width?, dashed?}.

import {fmtNum} from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) el.setAttribute(k, v);
  for (const child of children.flat()) if (child !== null && child !== undefined) el.append(child);
  return el;
}

// about how wide a tick label is drawn (11 px digits and letters), to leave room for it
const textWidth = (text) => 6.5 * String(text).length;

const given = (v) => v !== null && v !== undefined && v !== "";

/** An axis over values: numbers on a linear scale (log when they span over two decades, all
 * positive), anything else as evenly spaced categories. ``range`` fixes the ends ({min, max, log})
 * or the categories and their order ({categories}). Returns position(value) in 0..1 (null: not on
 * it), the labels to write at its ends or categories, and whether it is logarithmic. */
export function axisOf(values, range = null) {
  if (range && range.categories) return categoryAxis(range.categories.map(String));
  const numbers = values.map((v) => (given(v) ? Number(v) : NaN));
  const known = numbers.filter(Number.isFinite);
  if (range || (known.length && known.length === values.filter(given).length)) {
    let lo = range ? Number(range.min) : Math.min(...known),
      hi = range ? Number(range.max) : Math.max(...known);
    const log = range && range.log !== undefined ? range.log && lo > 0 : lo > 0 && hi / lo > 100;
    const f = log ? Math.log10 : (x) => x;
    const [a, b] = [f(lo), f(hi)];
    return {
      at: (v) => {
        if (!given(v) || !Number.isFinite(Number(v))) return null;
        const p = b === a ? 0.5 : (f(Number(v)) - a) / (b - a);
        return Number.isFinite(p) ? Math.min(1, Math.max(0, p)) : null;
      },
      ticks: lo === hi ? [[0.5, fmtNum(lo)]] : [[0, fmtNum(lo)], [1, fmtNum(hi)]],
      log,
    };
  }
  return categoryAxis([...new Set(values.filter(given).map(String))].sort());
}

function categoryAxis(categories) {
  const at = (v) => {
    const i = given(v) ? categories.indexOf(String(v)) : -1;
    return i < 0 ? null : categories.length === 1 ? 0.5 : i / (categories.length - 1);
  };
  return {at, ticks: categories.map((c) => [at(c), c]), log: false};
}

/** Parallel coordinates: an axis per column, a polyline per line (through the axes it has a value
 * on), the metric's axis named in bold. */
export function parallelCoordinates(columns, lines) {
  const axes = columns.map((c) => axisOf(c.values, c.range));
  // room on the right for the last axis's tick labels, written after it
  const right = Math.max(50, 12 + Math.max(0, ...(axes.at(-1)?.ticks || []).map(([, t]) => textWidth(t))));
  const W = 160 * Math.max(2, columns.length) + right - 50,
    H = 260,
    top = 24,
    bottom = 30,
    left = 50;
  const x = (i) => left + (i * (W - left - right)) / Math.max(1, columns.length - 1);
  const y = (p) => top + (1 - p) * (H - top - bottom);
  // the widest lines last, on top of the others
  const order = lines.map((_, j) => j).sort((a, b) => (lines[a].width || 2) - (lines[b].width || 2) || a - b);
  return svg(
    "svg",
    {viewBox: `0 0 ${W} ${H}`, width: W, height: H, "data-lines": lines.length, "data-axes": columns.length},
    columns.map((c, i) => svg("line", {x1: x(i), x2: x(i), y1: y(0), y2: y(1), stroke: "#9ca3af"})),
    order.map((j) => {
      const line = lines[j];
      const points = columns.map((c, i) => {
        const p = axes[i].at(c.values[j]);
        return p === null ? null : `${x(i)},${y(p)}`;
      });
      return svg(
        "polyline",
        {
          points: points.filter(Boolean).join(" "),
          fill: "none",
          stroke: line.color,
          "stroke-width": line.width || 2,
          "stroke-dasharray": line.dashed ? "4 3" : null,
          "data-job": line.name,
        },
        svg("title", {}, line.title || line.name),
      );
    }),
    // the labels over the lines (each with a halo: style.css)
    columns.map((c, i) =>
      svg(
        "g",
        {class: "axis"},
        svg("text", {x: x(i), y: H - 8, "text-anchor": "middle", class: c.metric ? "metric" : ""}, c.name),
        axes[i].log ? svg("text", {x: x(i), y: top - 10, "text-anchor": "middle", class: "tick"}, "log") : null,
        axes[i].ticks.map(([p, label]) => svg("text", {x: x(i) + 4, y: y(p) + 4, class: "tick"}, label)),
      ),
    ),
  );
}

/** A scatter of column ``xc`` against column ``yc``: a dot per line that has both values. */
export function scatterPlot(xc, yc, lines) {
  const ax = axisOf(xc.values, xc.range),
    ay = axisOf(yc.values, yc.range);
  // room on the left for the y axis's tick labels, written before it
  const left = Math.max(50, 10 + Math.max(0, ...ay.ticks.map(([, t]) => textWidth(t))));
  const SW = 370 + left,
    SH = 260;
  const sx = (p) => left + p * (SW - left - 30),
    sy = (p) => 20 + (1 - p) * (SH - 60);
  const shown = lines.map((_, j) => j).filter((j) => ax.at(xc.values[j]) !== null && ay.at(yc.values[j]) !== null);
  return svg(
    "svg",
    {viewBox: `0 0 ${SW} ${SH}`, width: SW, height: SH, "data-points": shown.length},
    svg("line", {x1: sx(0), x2: sx(1), y1: sy(0), y2: sy(0), stroke: "#9ca3af"}),
    svg("line", {x1: sx(0), x2: sx(0), y1: sy(0), y2: sy(1), stroke: "#9ca3af"}),
    ax.ticks.map(([p, label]) => svg("text", {x: sx(p), y: SH - 22, "text-anchor": "middle", class: "tick"}, label)),
    ay.ticks.map(([p, label]) => svg("text", {x: sx(0) - 4, y: sy(p) + 4, "text-anchor": "end", class: "tick"}, label)),
    svg("text", {x: (sx(0) + sx(1)) / 2, y: SH - 4, "text-anchor": "middle"}, xc.name + (ax.log ? " (log)" : "")),
    svg("text", {x: 12, y: 12}, yc.name + (ay.log ? " (log)" : "")),
    shown.map((j) =>
      svg(
        "circle",
        {
          cx: sx(ax.at(xc.values[j])),
          cy: sy(ay.at(yc.values[j])),
          r: lines[j].width > 2 ? 6 : 5,
          fill: lines[j].color,
          "data-job": lines[j].name,
        },
        svg("title", {}, `${lines[j].name}: ${xc.name}=${xc.values[j]}, ${yc.name}=${fmtNum(yc.values[j])}`),
      ),
    ),
  );
}
