// The compare page: one metric of several jobs in one chart, every metric as a small chart (a line
// per job, in the chips' colours), hyperparameters against a metric (parallel coordinates, and a
// scatter of one hyperparameter), the final metrics, and the hyperparameters that differ.

import {get, inPieces, MANY_JOBS} from "./api.js";
import {navigate} from "./router.js";
import {Chart, COLORS} from "./chart.js";
import {h, clear, extend, fmtNum, statusBadge, section, TERMINAL} from "./dom.js";
import {inDefinitionOrder, metricSource} from "./job.js";
import {parallelCoordinates, scatterPlot} from "./parallel.js";

export function mount(root, {jobs: names}) {
  document.title = "Compare · trainmon";
  let chart = null;
  let small = [];
  let timer = null;
  let left = false; // the user went to another page: nothing more is started (charts, the timer)
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
    const described = await Promise.all(
      inPieces(names, MANY_JOBS).map((part) => get("/api/descriptions", {jobs: part.join(",")})),
    );
    if (left) return;
    const answers = described
      .flatMap((answer) => answer.Jobs)
      .map(({TrainingJobName: name, Error: error, ...a}) => ({name, error, ...a}));
    const jobs = answers.filter((a) => !a.error);
    const missing = answers.filter((a) => a.error);
    const metricsOf = (a) => (a.Metrics.Metrics || []).map((m) => m.MetricName);
    const all = inDefinitionOrder(jobs.map((a) => a.Job), jobs.flatMap(metricsOf)); // the chart shows the first
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
    let offered = false; // the other jobs, offered once the field is first used (not a request the chart waits behind)
    const offer = () => {
      if (offered) return;
      offered = true;
      get("/api/jobs", {limit: 100}).then(
        (answer) =>
          known.append(
            ...answer.TrainingJobSummaries.filter((j) => !names.includes(j.TrainingJobName)).map((j) =>
              h("option", {value: j.TrainingJobName}),
            ),
          ),
        () => (offered = false),
      );
    };
    more.addEventListener("focus", offer);
    more.addEventListener("pointerenter", offer);
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
    );
    if (choices.length) {
      showChart(choices[0]);
      await new Promise((resolve) => setTimeout(resolve)); // its request goes out (at the next turn), then the rest is built
      if (left) return;
    }
    extend(
      root,
      choices.length > 1 ? section("Every metric", smallBox) : null,
      jobs.length > 1 && choices.length ? section("Hyperparameters against a metric", relations(jobs, choices)) : null,
      section("Final metrics", finalsTable(jobs, choices)),
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
  start().catch((exc) => left || clear(root, h("p", {class: "error"}, exc.message)));
  return () => {
    left = true;
    clearInterval(timer);
    if (chart) chart.destroy();
    for (const c of small) c.destroy();
  };
}

// -- hyperparameters against a metric ---------------------------------------------------------------

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
  const lines = jobs.map((a, i) => ({name: a.name, color: COLORS[i % COLORS.length]}));
  const column = (k) => ({name: k, values: jobs.map((a) => (a.Job.HyperParameters || {})[k])});
  const draw = () => {
    const m = metric.value;
    const objective = {name: m, values: jobs.map((a) => finals(a, m)), metric: true};
    parallel.replaceChildren(parallelCoordinates([...differ.map(column), objective], lines));
    if (!differ.length) {
      clear(scatter, h("p", {class: "muted"}, "The jobs' hyperparameters are the same."));
      return;
    }
    scatter.replaceChildren(scatterPlot(column(hyper.value), objective, lines));
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
