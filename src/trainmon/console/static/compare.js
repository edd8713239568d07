// The compare page: one metric of several jobs in one chart, every metric as a small chart (a line
// per job, in the chips' colours), hyperparameters against a metric (parallel coordinates, and a
// scatter of one hyperparameter), the final metrics, and the hyperparameters that differ.

import {get, jobPath} from "./api.js";
import {navigate} from "./router.js";
import {Chart, COLORS} from "./chart.js";
import {h, clear, fmtNum, statusBadge, section, TERMINAL} from "./dom.js";
import {metricSource} from "./job.js";

export function mount(root, {jobs: names}) {
  document.title = "Compare · trainmon";
  let chart = null;
  let small = [];
  let timer = null;
  clear(root, h("p", {class: "muted"}, "Loading…"));
  const start = async () => {
    if (!names.length) {
      clear(
        root,
        h("h1", {}, "Compare"),
        h("p", {}, "Choose jobs to compare on the ", h("a", {href: "/"}, "jobs page"), "."),
      );
      return;
    }
    const answers = await Promise.all(
      names.map((n) =>
        get(jobPath(n)).then(
          (a) => ({name: n, ...a}),
          (e) => ({name: n, error: e}),
        ),
      ),
    );
    const jobs = answers.filter((a) => !a.error);
    const missing = answers.filter((a) => a.error);
    const metricsOf = (a) => (a.Metrics.Metrics || []).map((m) => m.MetricName);
    const all = [...new Set(jobs.flatMap(metricsOf))].sort();
    const common = all.filter((m) => jobs.every((a) => metricsOf(a).includes(m)));
    const choices = [...common, ...all.filter((m) => !common.includes(m))];
    const metricSelect = h(
      "select",
      {name: "metric", onchange: () => showChart(metricSelect.value)},
      choices.map((m) => h("option", {value: m}, m + (common.includes(m) ? "" : " (not in every job)"))),
    );
    const chartBox = h("div", {class: "compare-chart"});
    const smallBox = h("div", {class: "system-grid compare-small"});
    const more = h("input", {type: "text", name: "add-job", list: "compare-job-names", placeholder: "another job"});
    const known = h("datalist", {id: "compare-job-names"});
    get("/api/jobs", {limit: 100}).then(
      (answer) =>
        known.append(
          ...answer.TrainingJobSummaries.filter((j) => !names.includes(j.TrainingJobName)).map((j) =>
            h("option", {value: j.TrainingJobName}),
          ),
        ),
      () => {},
    );
    const add = h(
      "form",
      {
        class: "add-job",
        onsubmit: (e) => {
          e.preventDefault();
          const name = more.value.trim();
          if (name && !names.includes(name))
            navigate(`/compare?jobs=${[...names, name].map(encodeURIComponent).join(",")}`);
        },
      },
      more,
      known,
      h("button", {type: "submit"}, "Add"),
    );
    clear(
      root,
      h("div", {class: "page-head"}, h("h1", {}, `Compare ${jobs.length} jobs`)),
      missing.length ? h("p", {class: "error"}, missing.map((a) => `${a.name}: ${a.error.message}`).join("; ")) : null,
      h(
        "div",
        {class: "legend-jobs"},
        jobs.map((a, i) =>
          h(
            "span",
            {class: "job-chip"},
            h("span", {class: "swatch", style: `background:${COLORS[i % COLORS.length]}`}),
            h("a", {href: `/jobs/${encodeURIComponent(a.name)}`}, a.name),
            " ",
            statusBadge(a.Job.TrainingJobStatus),
          ),
        ),
        add,
      ),
      h(
        "section",
        {class: "panel"},
        h("div", {class: "toolbar"}, h("label", {}, "Metric ", metricSelect)),
        choices.length ? chartBox : h("p", {class: "muted"}, "These jobs have no metrics yet."),
      ),
      choices.length > 1 ? section("Every metric", smallBox) : null,
      jobs.length > 1 && choices.length ? section("Hyperparameters against a metric", relations(jobs, choices)) : null,
      section("Final metrics", finalsTable(jobs, all)),
      section("Hyperparameters that differ", hyperparameterTable(jobs)),
    );

    function showChart(metric) {
      if (chart) chart.destroy();
      const origin = (a) => 1000 * (a.Job.TrainingStartTime || a.Job.CreationTime);
      chart = new Chart({
        key: "compare",
        title: metric,
        attrs: {"data-metric": metric, "data-compare": ""},
        x: "start",
        xMetrics: all.filter((m) => m !== metric),
        sources: jobs.map((a, i) =>
          metricSource(a.name, metric, {
            origin: origin(a),
            label: a.name,
            color: COLORS[i % COLORS.length],
            overlaid: true,
          }),
        ),
      });
      chartBox.replaceChildren(chart.el);
      chart.fetch();
    }
    if (choices.length) showChart(choices[0]);
    // every metric as a small chart: a line per job, as the main chart draws it
    if (choices.length > 1) {
      const origin = (a) => 1000 * (a.Job.TrainingStartTime || a.Job.CreationTime);
      small = choices.map(
        (metric) =>
          new Chart({
            key: `compare:${metric}`,
            title: metric,
            compact: true,
            x: "start",
            attrs: {"data-small": metric},
            sources: jobs
              .map((a, i) => ({a, i}))
              .filter(({a}) => metricsOf(a).includes(metric))
              .map(({a, i}) =>
                metricSource(a.name, metric, {origin: origin(a), label: a.name, color: COLORS[i % COLORS.length],
                  overlaid: true}),
              ),
          }),
      );
      smallBox.replaceChildren(...small.map((c) => c.el));
      small.forEach((c) => c.fetch());
    }
    if (jobs.some((a) => !TERMINAL.has(a.Job.TrainingJobStatus))) {
      timer = setInterval(() => {
        for (const c of [chart, ...small]) if (c && !c.view) c.fetch(); // running jobs grow
      }, 10000);
    }
  };
  start().catch((exc) => clear(root, h("p", {class: "error"}, exc.message)));
  return () => {
    clearInterval(timer);
    if (chart) chart.destroy();
    for (const c of small) c.destroy();
  };
}

// -- hyperparameters against a metric ---------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const child of children.flat()) if (child !== null) el.append(child);
  return el;
}

/** An axis over values: numbers on a linear scale (log when they span over two decades, all
 * positive), anything else as evenly spaced categories. Returns position(value) in 0..1 and the
 * labels to write at its ends or categories. */
function axisOf(values) {
  const numbers = values.map((v) => (v === null || v === undefined || v === "" ? NaN : Number(v)));
  const known = numbers.filter(Number.isFinite);
  if (known.length && known.length === values.filter((v) => v !== null && v !== undefined).length) {
    let lo = Math.min(...known),
      hi = Math.max(...known);
    const log = lo > 0 && hi / lo > 100;
    const f = log ? Math.log10 : (x) => x;
    const [a, b] = [f(lo), f(hi)];
    return {
      at: (v) => (Number.isFinite(Number(v)) ? (b === a ? 0.5 : (f(Number(v)) - a) / (b - a)) : null),
      ticks: lo === hi ? [[0.5, fmtNum(lo)]] : [[0, fmtNum(lo)], [1, fmtNum(hi)]],
      log,
    };
  }
  const categories = [...new Set(values.filter((v) => v !== null && v !== undefined).map(String))].sort();
  const at = (v) => {
    const i = categories.indexOf(String(v));
    return i < 0 ? null : categories.length === 1 ? 0.5 : i / (categories.length - 1);
  };
  return {at, ticks: categories.map((c) => [at(c), c]), log: false};
}

/** Parallel coordinates of the hyperparameters that differ and a chosen metric's final value (a
 * line per job), and a scatter of one hyperparameter against it. */
function relations(jobs, metrics) {
  const finals = (a, m) => (a.Metrics.Metrics || []).find((x) => x.MetricName === m)?.FinalValue;
  const keys = [...new Set(jobs.flatMap((a) => Object.keys(a.Job.HyperParameters || {})))].sort();
  const differ = keys.filter((k) => new Set(jobs.map((a) => (a.Job.HyperParameters || {})[k] ?? null)).size > 1);
  const metric = h("select", {name: "relation-metric"}, metrics.map((m) => h("option", {value: m}, m)));
  const hyper = h("select", {name: "relation-hyperparameter"}, differ.map((k) => h("option", {value: k}, k)));
  const parallel = h("div", {class: "parallel"});
  const scatter = h("div", {class: "scatter"});
  const color = (i) => COLORS[i % COLORS.length];
  const draw = () => {
    const m = metric.value;
    const columns = [...differ, m];
    const valuesOf = (c) => jobs.map((a) => (c === m ? finals(a, m) : (a.Job.HyperParameters || {})[c]));
    const axes = columns.map((c) => axisOf(valuesOf(c)));
    const W = 160 * Math.max(2, columns.length), H = 260, top = 24, bottom = 30, left = 50;
    const x = (i) => left + (i * (W - 2 * left)) / Math.max(1, columns.length - 1);
    const y = (p) => top + (1 - p) * (H - top - bottom);
    parallel.replaceChildren(
      svg(
        "svg",
        {viewBox: `0 0 ${W} ${H}`, width: W, height: H, "data-lines": jobs.length, "data-axes": columns.length},
        columns.map((c, i) =>
          svg(
            "g",
            {class: "axis"},
            svg("line", {x1: x(i), x2: x(i), y1: y(0), y2: y(1), stroke: "#9ca3af"}),
            svg("text", {x: x(i), y: H - 8, "text-anchor": "middle", class: c === m ? "metric" : ""}, c),
            axes[i].ticks.map(([p, label]) =>
              svg("text", {x: x(i) + 4, y: y(p) + 4, class: "tick"}, label),
            ),
          ),
        ),
        jobs.map((a, j) => {
          const points = columns.map((c, i) => {
            const p = axes[i].at(valuesOf(c)[j]);
            return p === null ? null : `${x(i)},${y(p)}`;
          });
          return svg(
            "polyline",
            {points: points.filter(Boolean).join(" "), fill: "none", stroke: color(j), "stroke-width": 2,
              "data-job": a.name},
            svg("title", {}, a.name),
          );
        }),
      ),
    );
    if (!differ.length) {
      clear(scatter, h("p", {class: "muted"}, "The jobs' hyperparameters are the same."));
      return;
    }
    const k = hyper.value;
    const xs = jobs.map((a) => (a.Job.HyperParameters || {})[k]);
    const ys = jobs.map((a) => finals(a, m));
    const ax = axisOf(xs), ay = axisOf(ys);
    const SW = 420, SH = 260;
    const sx = (p) => 50 + p * (SW - 80), sy = (p) => 20 + (1 - p) * (SH - 60);
    scatter.replaceChildren(
      svg(
        "svg",
        {viewBox: `0 0 ${SW} ${SH}`, width: SW, height: SH, "data-points": jobs.filter((_, j) => ax.at(xs[j]) !== null
          && ay.at(ys[j]) !== null).length},
        svg("line", {x1: sx(0), x2: sx(1), y1: sy(0), y2: sy(0), stroke: "#9ca3af"}),
        svg("line", {x1: sx(0), x2: sx(0), y1: sy(0), y2: sy(1), stroke: "#9ca3af"}),
        ax.ticks.map(([p, label]) => svg("text", {x: sx(p), y: SH - 22, "text-anchor": "middle", class: "tick"}, label)),
        ay.ticks.map(([p, label]) => svg("text", {x: sx(0) - 4, y: sy(p) + 4, "text-anchor": "end", class: "tick"},
          label)),
        svg("text", {x: (sx(0) + sx(1)) / 2, y: SH - 4, "text-anchor": "middle"}, k + (ax.log ? " (log)" : "")),
        svg("text", {x: 12, y: 12}, m),
        jobs.map((a, j) => {
          const px = ax.at(xs[j]), py = ay.at(ys[j]);
          if (px === null || py === null) return null;
          return svg("circle", {cx: sx(px), cy: sy(py), r: 5, fill: color(j), "data-job": a.name},
            svg("title", {}, `${a.name}: ${k}=${xs[j]}, ${m}=${fmtNum(ys[j])}`));
        }),
      ),
    );
  };
  metric.addEventListener("change", draw);
  hyper.addEventListener("change", draw);
  draw();
  return [
    h("div", {class: "toolbar"}, h("label", {}, "Metric ", metric), differ.length ? h("label", {}, "Scatter of ", hyper)
      : null),
    h("div", {class: "relations"}, parallel, scatter),
  ];
}

function finalsTable(jobs, metrics) {
  if (!metrics.length) return h("p", {class: "muted"}, "No metrics.");
  const value = (a, m) => (a.Metrics.Metrics || []).find((x) => x.MetricName === m)?.FinalValue;
  return h(
    "table",
    {class: "compare-finals"},
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        h("th", {}, "Job"),
        metrics.map((m) => h("th", {class: "num"}, m)),
      ),
    ),
    h(
      "tbody",
      {},
      jobs.map((a) =>
        h(
          "tr",
          {"data-job": a.name},
          h("td", {}, a.name),
          metrics.map((m) => h("td", {class: "num"}, fmtNum(value(a, m)))),
        ),
      ),
    ),
  );
}

function hyperparameterTable(jobs) {
  const keys = [...new Set(jobs.flatMap((a) => Object.keys(a.Job.HyperParameters || {})))].sort();
  const differ = keys.filter((k) => new Set(jobs.map((a) => (a.Job.HyperParameters || {})[k] ?? null)).size > 1);
  const same = keys.length - differ.length;
  const note = h(
    "p",
    {class: "muted"},
    same ? `${same} other hyperparameter${same === 1 ? " is" : "s are"} the same in every job.` : "",
  );
  if (!differ.length)
    return [
      h("p", {class: "muted"}, jobs.length > 1 ? "None: every job has the same hyperparameters." : "Only one job."),
      note,
    ];
  return [
    h(
      "table",
      {class: "compare-hyperparameters"},
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", {}, "Name"),
          jobs.map((a) => h("th", {}, a.name)),
        ),
      ),
      h(
        "tbody",
        {},
        differ.map((k) =>
          h(
            "tr",
            {"data-hyperparameter": k},
            h("td", {}, k),
            jobs.map((a) => h("td", {}, (a.Job.HyperParameters || {})[k] ?? "–")),
          ),
        ),
      ),
    ),
    note,
  ];
}
