// A metric chart over uPlot: one or more series ("sources": a job's metric, or several jobs' in
// the compare page), with zoom (drag) and pan (shift-drag) that fetch the detail of the range
// shown from the server, linear or log y, EMA smoothing, x as wall time, time since the start or
// another metric's value, raw points or a statistic per period, and NaN/±Infinity as red markers.
//
// A source is {label, color, origin (epoch ms: the job's start), points(start, end, width),
// statistics(stat, period, start, end), xSeries(metric, start, end, width)}: each returns a
// promise of columns (see api.series). For tests, each chart's state is on its <section>
// (data-points, data-x-min, data-x-max, data-zoomed, data-loading) and in window.trainmonCharts[key].

import {h, fmtNum, fmtUnit, fmtDuration, fmtTime, debounce, throttle} from "./dom.js";

// A y axis as wide as its longest tick label (never clipped), whatever the unit.
function fitTicks(u, values) {
  if (!values || !values.length) return 50;
  u.ctx.save();
  u.ctx.font = u.axes[1].font?.[0] || "12px sans-serif";
  const widest = Math.max(...values.map((v) => u.ctx.measureText(String(v)).width));
  u.ctx.restore();
  return Math.ceil(widest / devicePixelRatio) + 22;
}

// How a unit is named in a chart's title.
function unitLabel(unit) {
  return {Percent: "%", "Bytes/Second": "bytes/s", Bytes: "bytes", Milliseconds: "ms", Seconds: "s"}[unit] || unit;
}

// Ticks of a time-since-start axis fall on whole durations (10 s, 5 min, 2 h...), never 5000 s.
const DURATIONS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
  86400, 172800, 604800, 1209600, 2592000];

const uPlot = window.uPlot; // the minified build, loaded by index.html before the modules
export const charts = (window.trainmonCharts = window.trainmonCharts || {});
export const COLORS = ["#2563eb", "#dc2626", "#059669", "#9333ea", "#ea580c", "#0891b2", "#db2777", "#65a30d"];
const STATS = ["raw", "Average", "Minimum", "Maximum", "Sum", "SampleCount", "p50", "p90", "p99"];
const PERIODS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400];
const MARKER = "#dc2626";

function emptySeries() {
  return {t: [], v: [], k: [], stream: [], record: [], count: 0};
}

/** The index of the last of ascending ``t`` at or before ``x`` (-1: none). */
function lastAtOrBefore(t, x) {
  let lo = 0,
    hi = t.length - 1,
    found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (t[mid] <= x) {
      found = mid;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  return found;
}

/** Whether point j of ``b`` comes after the last point of ``a`` in (time, stream, record) order. */
function after(a, b, j) {
  const n = a.t.length - 1;
  if (n < 0) return true;
  if (b.t[j] !== a.t[n]) return b.t[j] > a.t[n];
  if ((b.stream[j] ?? 0) !== (a.stream[n] ?? 0)) return (b.stream[j] ?? 0) > (a.stream[n] ?? 0);
  return (b.record[j] ?? 0) > (a.record[n] ?? 0);
}

/** Append to ``into`` the points of ``add`` that come after its last one; how many were new. */
export function appendSeries(into, add) {
  let added = 0;
  for (let j = 0; j < add.t.length; j++) {
    if (!after(into, add, j)) continue;
    for (const key of ["t", "v", "k", "stream", "record"]) into[key].push(add[key][j] ?? null);
    added++;
  }
  into.count += added;
  return added;
}

/** Debiased exponential moving average (as TensorBoard's smoothing), skipping gaps. */
function ema(values, weight) {
  let last = 0,
    n = 0;
  return values.map((y) => {
    if (y === null || y === undefined) return null;
    last = last * weight + (1 - weight) * y;
    n++;
    return last / (1 - weight ** n);
  });
}

export class Chart {
  constructor({key, title, sources, xMetrics = [], x = "wall", compact = false, onPoint = null, attrs = {}, unit = null,
    sync = null, legend = null}) {
    this.key = key;
    this.legend = legend; // null: shown unless compact with one series; a function of the series' count
    this.title = title;
    this.unit = unit && unit !== "None" && unit !== "Count" ? unit : null; // CloudWatch's: values and ticks in it
    this.sync = sync; // charts of one sync key share the cursor's x
    this.compact = compact;
    this.onPoint = onPoint;
    this.settings = {x, log: false, smooth: 0, stat: "raw", period: "auto"};
    this.sources = sources.map((spec, i) => ({
      spec,
      color: spec.color || COLORS[i % COLORS.length],
      base: null,
      detail: null,
      stat: null,
      xBase: null,
      xDetail: null,
      pending: [],
      rows: null,
    }));
    this.view = null; // {xmin, xmax} when zoomed, in x units
    this.token = 0;
    this.requests = 0;
    this.u = null;
    this.structure = "";
    this.layout = null; // what the plot shows: {x, ys, maps}
    this.renderSoon = throttle(() => this.render(), 100);
    this.fetchSoon = debounce(() => this.fetch(), 200);
    this.refetchSoon = throttle(() => this.fetch(), 2000);
    this.api = {
      points: 0,
      total: 0,
      xMin: null,
      xMax: null,
      zoomed: false,
      requests: 0,
      series: [],
      pointAt: (i, source = 0) => this.pointAt(i, source),
    };
    charts[key] = this.api;
    this.build(xMetrics, attrs);
  }

  // -- the DOM --------------------------------------------------------------------------------

  build(xMetrics, attrs) {
    this.plotEl = h("div", {class: "plot"});
    this.note = h("span", {class: "chart-note"});
    this.error = h("p", {class: "chart-error", hidden: true});
    const select = (name, options, value, label) =>
      h(
        "label",
        {},
        label + " ",
        h(
          "select",
          {name, onchange: (e) => this.change(name, e.target.value)},
          options.map(([v, text]) => h("option", {value: v, selected: String(v) === String(value)}, text)),
        ),
      );
    this.xSelect = select("x", this.xOptions(xMetrics), this.settings.x, "x").querySelector("select");
    const smoothOut = h("output", {}, "0");
    const controls = this.compact
      ? null
      : h(
          "div",
          {class: "chart-controls"},
          h("label", {}, "x ", this.xSelect),
          select(
            "y",
            [
              ["linear", "linear"],
              ["log", "log"],
            ],
            "linear",
            "y",
          ),
          h(
            "label",
            {},
            "smooth ",
            h("input", {
              type: "range",
              name: "smooth",
              min: 0,
              max: 0.99,
              step: 0.01,
              value: 0,
              oninput: (e) => {
                smoothOut.textContent = Number(e.target.value).toFixed(2);
                this.change("smooth", e.target.value);
              },
            }),
            smoothOut,
          ),
          select(
            "stat",
            STATS.map((s) => [s, s === "raw" ? "raw points" : s]),
            "raw",
            "show",
          ),
          select(
            "period",
            [
              ["auto", "auto"],
              [1, "1 s"],
              [10, "10 s"],
              [60, "1 min"],
              [300, "5 min"],
              [3600, "1 h"],
            ],
            "auto",
            "period",
          ),
          h("button", {type: "button", name: "reset", onclick: () => this.resetZoom()}, "Reset zoom"),
        );
    this.el = h(
      "section",
      {
        class: "chart" + (this.compact ? " compact" : ""),
        ...attrs,
        "data-points": 0,
        "data-zoomed": "0",
        "data-loading": "1",
      },
      h(
        "header",
        {class: "chart-head"},
        h("h3", {}, this.title, this.unit ? h("span", {class: "unit"}, ` (${unitLabel(this.unit)})`) : null),
        this.note,
        controls,
      ),
      this.plotEl,
      this.error,
      this.compact
        ? null
        : h(
            "p",
            {class: "chart-hint"},
            "Drag to zoom, shift-drag to pan, double-click to reset." +
              (this.onPoint ? " Click a point to open its log record." : ""),
          ),
    );
    if (controls) controls.querySelector("[name=period]").disabled = true;
    this.resize = new ResizeObserver(() => {
      if (this.u && this.plotEl.clientWidth > 0) this.u.setSize(this.size());
    });
    this.resize.observe(this.plotEl);
  }

  xOptions(metrics) {
    return [
      ["wall", "wall time"],
      ["start", "time since start"],
      ...metrics.filter((m) => m !== this.key).map((m) => ["metric:" + m, m]),
    ];
  }

  /** The other metrics the x axis may be (new ones appear while a job runs). */
  setXMetrics(metrics) {
    const options = this.xOptions(metrics);
    if (options.length === this.xSelect.options.length) return;
    this.xSelect.replaceChildren(
      ...options.map(([v, text]) => h("option", {value: v, selected: v === this.settings.x}, text)),
    );
  }

  size() {
    return {width: Math.max(200, this.plotEl.clientWidth), height: this.compact ? 150 : 260};
  }

  /** The plot area's width in CSS pixels: the number of buckets to ask the server for. */
  width() {
    if (this.u) return Math.max(50, Math.round(this.u.bbox.width / devicePixelRatio));
    return Math.max(50, this.plotEl.clientWidth - 70);
  }

  change(name, value) {
    if (name === "x") {
      this.settings.x = value;
      this.view = null; // the x units changed
      for (const src of this.sources) src.detail = src.xDetail = null;
      this.fetch();
    } else if (name === "y") {
      this.settings.log = value === "log";
      this.render();
    } else if (name === "smooth") {
      this.settings.smooth = Number(value);
      this.renderSoon();
    } else if (name === "stat") {
      this.settings.stat = value;
      this.el.querySelector("[name=period]").disabled = value === "raw";
      this.fetch();
    } else if (name === "period") {
      this.settings.period = value;
      this.fetch();
    }
  }

  destroy() {
    this.token++;
    this.resize.disconnect();
    this.renderSoon.cancel();
    this.fetchSoon.cancel();
    this.refetchSoon.cancel();
    if (this.u) this.u.destroy();
    if (charts[this.key] === this.api) delete charts[this.key];
  }

  // -- data -----------------------------------------------------------------------------------

  xMetric() {
    return this.settings.x.startsWith("metric:") ? this.settings.x.slice(7) : null;
  }

  /** The time range (epoch ms) a source must cover for the x range ``view``. */
  timeRange(src, view) {
    const mode = this.settings.x;
    if (mode === "wall") return {start: Math.floor(view.xmin * 1000), end: Math.ceil(view.xmax * 1000) + 1};
    if (mode === "start") {
      return {
        start: Math.floor(src.spec.origin + view.xmin * 1000),
        end: Math.ceil(src.spec.origin + view.xmax * 1000) + 1,
      };
    }
    // x is another metric's value: the times of the points shown around that range
    const rows = src.rows;
    if (!rows || !rows.x.length) return null;
    let lo = 0,
      hi = rows.x.length - 1;
    for (let j = 0; j < rows.x.length; j++) if (rows.x[j] <= view.xmin) lo = j;
    for (let j = rows.x.length - 1; j >= 0; j--) if (rows.x[j] >= view.xmax) hi = j;
    let start = Infinity,
      end = -Infinity;
    for (let j = lo; j <= hi; j++) {
      start = Math.min(start, rows.t[j]);
      end = Math.max(end, rows.t[j]);
    }
    return {start, end: end + 1};
  }

  period(src, range) {
    if (this.settings.period !== "auto") return Number(this.settings.period);
    const base = src.base && src.base.t.length ? src.base : null;
    const start = range ? range.start : base ? base.t[0] : src.spec.origin;
    const end = range ? range.end : base ? base.t[base.t.length - 1] : Date.now();
    const wanted = Math.max(1, (end - start) / 1000 / (this.width() / 4));
    return PERIODS.find((p) => p >= wanted) || PERIODS[PERIODS.length - 1];
  }

  /** Load what the current view and settings show, from the server. */
  async fetch() {
    const token = ++this.token;
    this.el.dataset.loading = "1";
    const width = this.width();
    const {stat} = this.settings;
    const metric = this.xMetric();
    const results = await Promise.allSettled(
      this.sources.map(async (src) => {
        const range = this.view ? this.timeRange(src, this.view) : null;
        const got = {};
        if (stat === "raw") {
          this.requests++;
          const answer = await src.spec.points(range?.start, range?.end, width);
          got[range ? "detail" : "base"] = answer;
        } else {
          // the whole series: from its first point to now (the server's default ends a minute
          // after the job's last status change, which leaves out what a running job printed since)
          const base = src.base && src.base.t.length ? src.base : null;
          const whole = {
            start: base ? base.t[0] : Math.floor(src.spec.origin),
            end: Math.max(base ? base.t[base.t.length - 1] : 0, Date.now()) + 60_000,
          };
          const span = range || whole;
          got.stat = await src.spec.statistics(stat, this.period(src, range), span.start, span.end);
        }
        if (metric) {
          got.xBase = await src.spec.xSeries(metric);
          if (range) got.xDetail = await src.spec.xSeries(metric, range.start, range.end, width);
        }
        return got;
      }),
    );
    if (token !== this.token) return; // a newer fetch is under way
    const errors = [];
    results.forEach((result, i) => {
      const src = this.sources[i];
      if (result.status === "rejected") {
        errors.push((this.sources.length > 1 ? src.spec.label + ": " : "") + result.reason.message);
        return;
      }
      const got = result.value;
      if (got.base) {
        src.base = got.base;
        for (const add of src.pending.splice(0)) appendSeries(src.base, add);
      }
      if (stat === "raw") src.detail = got.detail || null;
      src.stat = got.stat || null;
      src.xBase = got.xBase || null;
      src.xDetail = got.xDetail || null;
    });
    this.error.hidden = !errors.length;
    this.error.textContent = errors.join("; ");
    this.api.requests = this.requests;
    this.el.dataset.loading = "0";
    this.render();
  }

  /** Other sources (a tuning job's new trials): those of a label known keep their points; the plot
   * is made again (a series more or less), with the zoom and settings as they are. */
  setSources(specs) {
    const known = new Map(this.sources.map((src) => [src.spec.label, src]));
    this.sources = specs.map((spec, i) => {
      const color = spec.color || COLORS[i % COLORS.length];
      const old = known.get(spec.label);
      if (old) return Object.assign(old, {spec, color});
      return {spec, color, base: null, detail: null, stat: null, xBase: null, xDetail: null, pending: [], rows: null};
    });
    this.structure = ""; // a new plot at the next render
    return this.fetch();
  }

  /** New points of source ``i`` (live); how many were new (the last ones of ``add``). */
  append(i, add) {
    const src = this.sources[i];
    if (!src.base) {
      src.pending.push(add);
      return 0;
    }
    const added = appendSeries(src.base, add);
    if (!added) return 0;
    if (this.settings.stat !== "raw") this.refetchSoon();
    else if (!this.view) {
      if (src.base.t.length > 8 * this.width() + 2000)
        this.refetchSoon(); // thin it out again
      else this.renderSoon();
    }
    return added;
  }

  /** Another chart's metric changed; it matters if it is our x. */
  dependencyChanged(metric) {
    if (this.xMetric() === metric && !this.view) this.renderSoon();
  }

  /** The points a source shows, as rows ordered by x. */
  rowsOf(src) {
    const shown = this.settings.stat !== "raw" ? src.stat : src.detail || src.base;
    const rows = {x: [], t: [], y: [], k: [], i: []};
    if (!shown) return rows;
    let xOf;
    const mode = this.settings.x;
    if (mode === "wall") xOf = (t) => t / 1000;
    else if (mode === "start") xOf = (t) => (t - src.spec.origin) / 1000;
    else {
      // x is the last value of the other metric at or before each point's time
      const table = {t: [], v: []};
      const detail = src.xDetail;
      const pieces =
        detail && detail.t.length
          ? [
              [src.xBase, (t) => t < detail.t[0]],
              [detail, () => true],
              [src.xBase, (t) => t > detail.t[detail.t.length - 1]],
            ]
          : [[src.xBase, () => true]];
      for (const [part, keep] of pieces) {
        if (!part) continue;
        part.t.forEach((t, j) => {
          if (keep(t) && part.v[j] !== null) {
            table.t.push(t);
            table.v.push(part.v[j]);
          }
        });
      }
      xOf = (t) => {
        const j = lastAtOrBefore(table.t, t);
        return j < 0 ? null : table.v[j];
      };
    }
    let sorted = true;
    for (let j = 0; j < shown.t.length; j++) {
      const x = xOf(shown.t[j]);
      if (x === null || x === undefined) continue;
      if (rows.x.length && x < rows.x[rows.x.length - 1]) sorted = false;
      rows.x.push(x);
      rows.t.push(shown.t[j]);
      const y = shown.v[j];
      rows.y.push(this.settings.log && y !== null && y <= 0 ? null : y);
      rows.k.push(shown.k[j] || null);
      rows.i.push(j);
    }
    if (!sorted) {
      // e.g. an x metric that goes down again: order by it, stably
      const order = rows.x.map((_, j) => j).sort((a, b) => rows.x[a] - rows.x[b] || a - b);
      for (const key of Object.keys(rows)) rows[key] = order.map((j) => rows[key][j]);
    }
    rows.shown = shown;
    return rows;
  }

  /** The plot's columns: one x, and per source its y (and smoothed y); several sources are aligned
   * on the union of their x values. ``maps[s][column]`` is source s's row there (or -1). */
  layoutOf(rowsList) {
    const smooth = this.settings.smooth > 0;
    const ysOf = (rows) => (smooth ? [rows.y, ema(rows.y, this.settings.smooth)] : [rows.y]);
    if (rowsList.length === 1) {
      const rows = rowsList[0];
      return {x: rows.x, ys: ysOf(rows), maps: [rows.x.map((_, j) => j)]};
    }
    const xs = Array.from(new Set(rowsList.flatMap((r) => r.x))).sort((a, b) => a - b);
    const column = new Map(xs.map((x, j) => [x, j]));
    const ys = [];
    const maps = rowsList.map((rows) => {
      const map = new Array(xs.length).fill(-1);
      rows.x.forEach((x, j) => (map[column.get(x)] = j));
      for (const y of ysOf(rows)) ys.push(map.map((j) => (j < 0 ? undefined : y[j])));
      return map;
    });
    return {x: xs, ys, maps};
  }

  render() {
    this.renderSoon.cancel();
    const rowsList = this.sources.map((src) => (src.rows = this.rowsOf(src)));
    const layout = (this.layout = this.layoutOf(rowsList));
    const structure = JSON.stringify([
      this.sources.length,
      this.settings.x,
      this.settings.log,
      this.settings.smooth > 0,
      this.settings.stat,
    ]);
    const data = [layout.x, ...layout.ys];
    if (!this.u || structure !== this.structure) {
      if (this.u) this.u.destroy();
      this.structure = structure;
      this.u = new uPlot(this.options(), data, this.plotEl);
    } else {
      this.u.setData(data, !this.view);
    }
    if (this.view) this.u.setScale("x", {min: this.view.xmin, max: this.view.xmax});
    const points = rowsList.reduce((n, rows) => n + rows.x.length, 0);
    const nonFinite = rowsList.reduce((n, rows) => n + rows.k.filter(Boolean).length, 0);
    const total = this.sources.reduce((n, src) => n + ((src.detail || src.base)?.count || 0), 0);
    Object.assign(this.api, {
      points,
      total,
      zoomed: !!this.view,
      requests: this.requests,
      x: this.settings.x,
      series: this.sources.map((src) => ({label: src.spec.label, points: src.rows.x.length})),
      stat: this.settings.stat,
      log: this.settings.log,
      smooth: this.settings.smooth,
    });
    this.el.dataset.points = points;
    this.el.dataset.zoomed = this.view ? "1" : "0";
    this.el.dataset.xMode = this.settings.x;
    const what = this.settings.stat === "raw" ? "points" : `${this.settings.stat} per period`;
    this.note.textContent =
      `${points} ${what}` +
      (total > points && this.settings.stat === "raw" ? ` of ${total}` : "") +
      (nonFinite ? ` · ${nonFinite} non-finite` : "") +
      (this.view ? " · zoomed" : "");
    this.scaleChanged();
  }

  scaleChanged() {
    if (!this.u) return;
    const {min, max} = this.u.scales.x;
    this.api.xMin = min ?? null;
    this.api.xMax = max ?? null;
    this.el.dataset.xMin = min ?? "";
    this.el.dataset.xMax = max ?? "";
  }

  options() {
    const mode = this.settings.x;
    const smooth = this.settings.smooth > 0;
    const xValue =
      mode === "wall"
        ? (u, v) => (v == null ? "–" : fmtTime(v))
        : mode === "start"
          ? (u, v) => (v == null ? "–" : fmtDuration(v))
          : (u, v) => (v == null ? "–" : fmtNum(v));
    const series = [
      {label: mode === "wall" ? "time" : mode === "start" ? "since start" : this.xMetric(), value: xValue},
    ];
    this.sources.forEach((src, s) => {
      const label = this.sources.length > 1 ? src.spec.label : this.title;
      const valueOf = (u, v, sidx, idx) => {
        if (idx === null || idx === undefined) return "–";
        const kind = this.kindAt(s, idx);
        return kind || (v === null || v === undefined ? "–" : fmtUnit(v, this.unit));
      };
      series.push({
        label: smooth ? label + " (raw)" : label,
        stroke: smooth ? src.color + "55" : src.color,
        width: smooth ? 1 : 1.5,
        spanGaps: true,
        value: valueOf,
        points: {size: 5, fill: src.color},
      });
      if (smooth)
        series.push({
          label: label + " (smoothed)",
          stroke: src.color,
          width: 2,
          spanGaps: true,
          value: valueOf,
          points: {show: false},
        });
    });
    const axis = {stroke: "#6b7280", grid: {stroke: "#e5e7eb", width: 1}, ticks: {stroke: "#e5e7eb", width: 1}};
    return {
      ...this.size(),
      series,
      scales: {
        // one point makes no range: a minute around it (a unit, off the time axis); uPlot's own
        // is a day after it, in milliseconds (1000 days of our seconds)
        x: {
          time: mode === "wall",
          range: (u, min, max) => {
            const pad = mode.startsWith("metric:") ? 1 : 30;
            const xs = u.data[0];
            if (min === null || max === null) return [0, 1];
            if (xs.length === 1 && !this.view) return [xs[0] - pad, xs[0] + pad];
            return min === max ? [min - pad, max + pad] : [min, max];
          },
        },
        y: this.settings.log ? {distr: 3, log: 10} : {},
      },
      axes: [
        {...axis, ...(mode === "start" ? {values: (u, splits) => splits.map(fmtDuration), incrs: DURATIONS, space: 70} : {})},
        {...axis, size: fitTicks, values: (u, splits) => splits.map((v) => fmtUnit(v, this.unit))},
      ],
      legend: {
        show: this.legend ? this.legend(this.sources.length) : !this.compact || this.sources.length > 1,
        live: true,
      },
      cursor: {
        ...(this.sync ? {sync: {key: this.sync, setSeries: false}} : {}),
        drag: {x: true, y: false, setScale: true},
        bind: {
          dblclick: () => (e) => {
            if (e.button === 0) this.resetZoom();
            return null;
          },
          mousedown:
            (u, targ, handler, onlyTarg = true) =>
            (e) => {
              if (e.button !== 0 || (onlyTarg && e.target !== targ)) return;
              if (e.shiftKey) this.startPan(e);
              else handler(e);
            },
        },
      },
      hooks: {
        ready: [(u) => this.listen(u)],
        setSelect: [
          (u) => {
            if (u.select.width < 2) return;
            this.zoomTo(u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x"));
          },
        ],
        setScale: [(u, key) => key === "x" && this.scaleChanged()],
        draw: [(u) => this.drawMarkers(u)],
      },
    };
  }

  kindAt(source, column) {
    const row = this.layout?.maps[source]?.[column];
    const rows = this.sources[source]?.rows; // (none yet for a source just given: setSources)
    return row === undefined || row < 0 || !rows ? null : rows.k[row];
  }

  // -- zoom, pan, click ---------------------------------------------------------------------

  zoomTo(xmin, xmax) {
    if (!(xmax > xmin)) return;
    this.view = {xmin, xmax};
    this.el.dataset.zoomed = "1";
    this.api.zoomed = true;
    this.fetchSoon();
  }

  resetZoom() {
    this.view = null;
    this.fetchSoon.cancel();
    for (const src of this.sources) src.detail = src.xDetail = null;
    if (this.settings.stat !== "raw") this.fetch();
    else this.render();
  }

  startPan(e) {
    const u = this.u;
    const {min, max} = u.scales.x;
    const perPx = (max - min) / (u.bbox.width / devicePixelRatio);
    const x0 = e.clientX;
    const move = (ev) => {
      const shift = (ev.clientX - x0) * perPx;
      this.view = {xmin: min - shift, xmax: max - shift};
      u.setScale("x", {min: this.view.xmin, max: this.view.xmax});
    };
    const up = () => {
      document.removeEventListener("mousemove", move);
      document.removeEventListener("mouseup", up);
      if (this.view) this.zoomTo(this.view.xmin, this.view.xmax);
    };
    document.addEventListener("mousemove", move);
    document.addEventListener("mouseup", up);
  }

  listen(u) {
    let down = null;
    u.over.addEventListener("mousedown", (e) => (down = {x: e.clientX, y: e.clientY, shift: e.shiftKey}));
    u.over.addEventListener("mouseup", (e) => {
      if (!down || down.shift || Math.hypot(e.clientX - down.x, e.clientY - down.y) > 3) return;
      down = null;
      this.click(u);
    });
  }

  /** A click on the plot: the point under the cursor (nearest in x, then in y across sources). */
  click(u) {
    const column = u.cursor.idx;
    if (!this.onPoint || column === null || column === undefined || !this.layout) return;
    let best = null;
    this.sources.forEach((src, s) => {
      const row = this.layout.maps[s][column];
      if (row === undefined || row < 0) return;
      const y = src.rows.y[row];
      const top = y === null ? 0 : u.valToPos(y, "y");
      const distance = Math.abs(top - u.cursor.top);
      if (!best || distance < best.distance) best = {s, row, distance};
    });
    if (!best) return;
    const src = this.sources[best.s];
    const rows = src.rows;
    const j = rows.i[best.row];
    const record = rows.shown.record[j];
    if (record === undefined || record === null) return; // a statistic: no one record made it
    this.onPoint({
      source: src.spec,
      t: rows.t[best.row],
      value: rows.shown.v[j],
      kind: rows.k[best.row],
      stream: rows.shown.stream[j],
      record,
    });
  }

  /** Where on the page (CSS px from the viewport's corner) source ``s``'s ``i``-th shown point is drawn. */
  pointAt(i, s = 0) {
    const u = this.u;
    const rows = this.sources[s]?.rows;
    if (!u || !rows || i < 0 || i >= rows.x.length) return null;
    const box = u.over.getBoundingClientRect();
    const y = rows.y[i];
    const j = rows.i[i];
    return {
      x: box.left + u.valToPos(rows.x[i], "x"),
      y: box.top + (y === null ? 2 : u.valToPos(y, "y")),
      value: y,
      kind: rows.k[i],
      t: rows.t[i],
      stream: rows.shown.stream[j],
      record: rows.shown.record[j],
    };
  }

  /** NaN and ±Infinity have no place on the y axis: a red triangle at the top (+Infinity), at the
   * bottom (-Infinity), or a red diamond at the top (NaN), at the point's x. */
  drawMarkers(u) {
    if (!this.layout) return;
    const ctx = u.ctx;
    const {left, top, width, height} = u.bbox;
    const r = 5 * devicePixelRatio;
    ctx.save();
    ctx.fillStyle = MARKER;
    this.sources.forEach((src) => {
      const rows = src.rows;
      if (!rows) return; // a source just given (setSources): drawn at the next render
      rows.k.forEach((kind, j) => {
        if (!kind) return;
        const cx = u.valToPos(rows.x[j], "x", true);
        if (cx < left - r || cx > left + width + r) return;
        ctx.beginPath();
        if (kind === "-Infinity") {
          ctx.moveTo(cx, top + height);
          ctx.lineTo(cx - r, top + height - 1.8 * r);
          ctx.lineTo(cx + r, top + height - 1.8 * r);
        } else if (kind === "Infinity") {
          ctx.moveTo(cx, top);
          ctx.lineTo(cx - r, top + 1.8 * r);
          ctx.lineTo(cx + r, top + 1.8 * r);
        } else {
          ctx.moveTo(cx, top);
          ctx.lineTo(cx - r, top + r);
          ctx.lineTo(cx, top + 2 * r);
          ctx.lineTo(cx + r, top + r);
        }
        ctx.closePath();
        ctx.fill();
      });
    });
    ctx.restore();
  }
}

// -- a chart of values given, not fetched ---------------------------------------------------------

const INTEGERS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000];

/** A chart of values the page has already (a tuning job's final objective per trial), on the
 * same uPlot look as the metric charts: ``set(x, series)`` draws it, each series {label, values,
 * color, kind: "points" (a dot per value, in ``colors[i]`` when given) or "step" (a stepped line)}.
 * Its state is on its <section> (data-points) and in window.trainmonCharts[key] (series, points). */
export class PlotChart {
  constructor({key, title, xLabel, attrs = {}, integerX = false, xValue = fmtNum, yValue = fmtNum}) {
    this.key = key;
    this.xLabel = xLabel;
    this.integerX = integerX;
    this.xValue = xValue;
    this.yValue = yValue;
    this.u = null;
    this.shape = "";
    this.data = null;
    this.series = [];
    this.api = {points: 0, series: []};
    charts[key] = this.api;
    this.plotEl = h("div", {class: "plot"});
    this.note = h("span", {class: "chart-note"});
    this.el = h(
      "section",
      {class: "chart", ...attrs, "data-points": 0},
      h("header", {class: "chart-head"}, h("h3", {}, title), this.note),
      this.plotEl,
    );
    this.resize = new ResizeObserver(() => {
      if (this.u && this.plotEl.clientWidth > 0) this.u.setSize(this.size());
    });
    this.resize.observe(this.plotEl);
  }

  size() {
    return {width: Math.max(200, this.plotEl.clientWidth), height: 260};
  }

  set(x, series, note = "") {
    this.series = series;
    this.data = [x, ...series.map((s) => s.values)];
    const shape = JSON.stringify(series.map((s) => [s.label, s.kind, s.color]));
    if (!this.u || shape !== this.shape) {
      if (this.u) this.u.destroy();
      this.shape = shape;
      this.u = new uPlot(this.options(), this.data, this.plotEl);
    } else {
      this.u.setData(this.data);
    }
    const counts = series.map((s) => s.values.filter((v) => v !== null && v !== undefined).length);
    this.api.series = series.map((s, i) => ({label: s.label, points: counts[i]}));
    this.api.points = counts[0] || 0;
    this.el.dataset.points = this.api.points;
    this.note.textContent = note;
  }

  options() {
    const axis = {stroke: "#6b7280", grid: {stroke: "#e5e7eb", width: 1}, ticks: {stroke: "#e5e7eb", width: 1}};
    const show = (format) => (u, v) => (v === null || v === undefined ? "–" : format(v));
    return {
      ...this.size(),
      series: [
        {label: this.xLabel, value: show(this.xValue)},
        ...this.series.map((s) =>
          s.kind === "step"
            ? {label: s.label, stroke: s.color, width: 2, spanGaps: true, value: show(this.yValue),
              paths: uPlot.paths.stepped({align: 1}), points: {show: false}}
            : {label: s.label, stroke: s.color, width: 0, value: show(this.yValue), paths: () => null,
              points: {show: !s.colors, size: 8, fill: s.color, stroke: s.color}},
        ),
      ],
      scales: {
        x: {time: false, range: (u, min, max) => (min === null || max === null ? [0, 1] : [min - 0.5, max + 0.5])},
        y: {},
      },
      axes: [
        {...axis, ...(this.integerX ? {incrs: INTEGERS, values: (u, splits) => splits.map(String), space: 40} : {})},
        {...axis, size: fitTicks, values: (u, splits) => splits.map(this.yValue)},
      ],
      legend: {show: true, live: true},
      cursor: {drag: {x: false, y: false}},
      hooks: {draw: [(u) => this.drawDots(u)]},
    };
  }

  /** The dots of the series that give each its own colour. */
  drawDots(u) {
    const ctx = u.ctx;
    const r = 4 * devicePixelRatio;
    ctx.save();
    this.series.forEach((s, i) => {
      if (!s.colors) return;
      const ys = u.data[i + 1];
      u.data[0].forEach((x, j) => {
        if (ys[j] === null || ys[j] === undefined) return;
        ctx.beginPath();
        ctx.fillStyle = s.colors[j];
        ctx.arc(u.valToPos(x, "x", true), u.valToPos(ys[j], "y", true), r, 0, 2 * Math.PI);
        ctx.fill();
      });
    });
    ctx.restore();
  }

  destroy() {
    this.resize.disconnect();
    if (this.u) this.u.destroy();
    if (charts[this.key] === this.api) delete charts[this.key];
  }
}
