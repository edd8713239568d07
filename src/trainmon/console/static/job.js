// The job page: status and its timeline, the failure, hyperparameters, metric definitions and what
// they matched, final metrics, a live chart per metric, system metrics, the profile and the log.

import {get, post, jobPath, liveStream, series, statisticSeries, ApiError, inPieces, MANY_JOBS} from "./api.js";
import {Chart, COLORS} from "./chart.js";
import {
  h,
  clear,
  foldedPanel,
  fmtNum,
  fmtTime,
  fmtDuration,
  statusBadge,
  table,
  section,
  throttle,
  warningList,
  shellJoin,
  fmtBytes,
  fmtUnit,
  TERMINAL,
  stopDialog,
  tuningJobOf,
} from "./dom.js";
import {LogPane} from "./logs.js";
import {RulesPanel} from "./rules.js";

const LOG_TAIL = 500;

/** A chart source over one metric (or system metric) of job ``name``. */
// Train, validation and test variants of one metric: "train:loss", "validation:loss", "val_loss",
// "loss/valid", "loss" and "val_loss" share the base "loss".
const SPLIT = "(?:train(?:ing)?|val(?:id(?:ation)?)?|test|eval(?:uation)?)";
const SPLIT_BEFORE = new RegExp(`^${SPLIT}[:_./-]`, "i");
const SPLIT_AFTER = new RegExp(`[:_./-]${SPLIT}$`, "i");

export function metricBase(name) {
  return name.replace(SPLIT_BEFORE, "").replace(SPLIT_AFTER, "");
}

/** The metric names ``have`` in the order the jobs define them (the first job's definitions first,
 * as a user writes the metric they watch most first), then any they do not define, by name. */
export function inDefinitionOrder(jobs, have) {
  const definitions = jobs.flatMap((job) => job.AlgorithmSpecification?.MetricDefinitions || []);
  const defined = [...new Set(definitions.map((d) => d.Name))];
  const present = new Set(have);
  return [...defined.filter((n) => present.has(n)), ...[...present].filter((n) => !defined.includes(n)).sort()];
}

/** The metrics that pair, as groups of at least two names, by their base, in the names' order. */
export function metricPairs(names) {
  const groups = new Map();
  for (const name of names) {
    const base = metricBase(name);
    if (!groups.has(base)) groups.set(base, []);
    groups.get(base).push(name);
  }
  return [...groups.entries()].filter(([, members]) => members.length > 1).map(([base, members]) => ({base, members}));
}

// Several jobs' points of one metric asked in one request (Compare's charts, a tuning job's
// trials): the asks of one turn of the event loop for the same metric, range and width go together,
// in requests of at most MANY_JOBS jobs (the route's limit).
const batches = new Map();

function batchedPoints(name, metric, params) {
  const key = JSON.stringify([metric, params]);
  let batch = batches.get(key);
  if (!batch) {
    batch = new Map(); // job -> the asks waiting for its points
    batches.set(key, batch);
    setTimeout(() => {
      batches.delete(key);
      for (const names of inPieces([...batch.keys()], MANY_JOBS)) askPoints(metric, params, names, batch);
    }, 0);
  }
  return new Promise((resolve, reject) => batch.set(name, [...(batch.get(name) || []), {resolve, reject}]));
}

/** One request for the points of ``names`` (at most MANY_JOBS), answering their asks in ``batch``. */
async function askPoints(metric, params, names, batch) {
  try {
    const answer = await get(`/api/metrics/${encodeURIComponent(metric)}/points`, {...params, jobs: names.join(",")});
    for (const found of answer.Series) {
      for (const ask of batch.get(found.TrainingJobName) || []) {
        if (found.Error) ask.reject(new ApiError(400, found.Error.code, found.Error.message));
        else ask.resolve(series(found));
      }
    }
  } catch (exc) {
    for (const name of names) for (const ask of batch.get(name) || []) ask.reject(exc);
  }
}

export function metricSource(name, metric, {origin, label, color, others, overlaid, buckets} = {}) {
  // Overlaid on other jobs' series (compare), a series gets a bucket per three pixels (or as many as
  // ``buckets(width)`` says: a tuning job's hundreds of trials get fewer) and no log records: each
  // spike still shows (a bucket keeps its lowest and highest), in a third of the bytes; and it is
  // asked with the other jobs' in one request.
  const detail = overlaid
    ? (width) => ({width: buckets ? buckets(width) : Math.max(1, Math.ceil(width / 3)), records: 0, times: "delta"})
    : (width) => ({width, times: "delta"});
  return {
    label: label || metric,
    color,
    origin,
    points: async (start, end, width) =>
      overlaid
        ? batchedPoints(name, metric, {...detail(width), start, end})
        : series(await get(jobPath(name, "metrics", metric, "points"), {...detail(width), start, end})),
    statistics: async (stat, period, start, end) =>
      statisticSeries(await get(jobPath(name, "metrics", metric, "statistics"), {stat, period, start, end}), stat),
    xSeries: async (other, start, end, width) => {
      const live = others && others(other);
      if (start === undefined && live) return live;
      return series(await get(jobPath(name, "metrics", other, "points"), {width: width || 2000, start, end, times: "delta"}));
    },
  };
}

function profileSource(name, host, metric, origin) {
  return {
    ...systemSource(name, host, metric, origin),
    points: async (start, end, width) =>
      series(await get(jobPath(name, "profile", host, metric, "points"), {width, start, end, times: "delta"})),
  };
}

function systemSource(name, host, metric, origin) {
  return {
    label: host,
    origin,
    points: async (start, end, width) =>
      series(await get(jobPath(name, "system", host, metric, "points"), {width, start, end, times: "delta"})),
    statistics: async () => {
      throw new ApiError(400, "ValidationException", "statistics are for training metrics");
    },
    xSeries: async () => null,
  };
}

/** A job whose profiler rules include ProfilerReport has a report (made from what is there so far). */
function hasReport(job) {
  return (job.ProfilerRuleConfigurations || []).some(
    (c) => (c.RuleParameters || {}).rule_to_invoke === "ProfilerReport",
  );
}

export function mount(root, {name}) {
  const page = new JobPage(root, name);
  page.start();
  return () => page.dispose();
}

class JobPage {
  constructor(root, name) {
    this.openedAt = Date.now();
    this.root = root;
    this.name = name;
    this.charts = new Map(); // metric -> Chart
    this.overlays = new Map(); // base -> {chart, members}: the metrics that pair, on one chart
    this.systemCharts = [];
    this.disposed = false;
    this.after = null; // log positions
    this.timers = [];
    this.refreshSoon = throttle(() => this.refresh(), 1500);
    this.showTablesSoon = throttle(() => this.showTables(), 1000);
  }

  async start() {
    document.title = `${this.name} · trainmon`;
    clear(this.root, h("p", {class: "muted"}, "Loading…"));
    let answer;
    try {
      answer = await get(jobPath(this.name));
    } catch (exc) {
      clear(this.root, h("h1", {}, this.name), h("p", {class: "error"}, exc.message));
      return;
    }
    if (this.disposed) return;
    this.build(answer);
    await Promise.all([this.loadCharts(answer), this.loadLog()]);
    if (this.disposed) return;
    this.follow();
    this.loadSystem();
    this.loadProfile();
    // statuses, the definitions' counts, the rules, points and records all come live (follow)
    this.timers.push(
      setInterval(() => {
        const duration = this.overview.querySelector("[data-fact=Duration]");
        if (duration && !TERMINAL.has(this.job.TrainingJobStatus)) duration.textContent = this.duration();
      }, 1000),
    );
  }

  dispose() {
    this.disposed = true;
    if (this.stream) this.stream.close();
    for (const timer of this.timers) clearInterval(timer);
    this.refreshSoon.cancel();
    this.showTablesSoon.cancel();
    for (const chart of [...this.charts.values(), ...this.systemCharts]) chart.destroy();
    for (const {chart} of this.overlays.values()) chart.destroy();
  }

  origin() {
    const job = this.job;
    return 1000 * (job.TrainingStartTime || job.CreationTime);
  }

  // -- the page -------------------------------------------------------------------------------

  build({Job: job, Metrics: metrics}) {
    this.job = job;
    this.metrics = metrics;
    this.head = h("div", {class: "job-head"});
    this.overview = h("div", {class: "job-overview"});
    this.tables = h("div", {class: "grid"});
    this.rules = new RulesPanel(this.name);
    this.chartsEl = h("div", {class: "charts"});
    this.systemEl = h("div", {class: "system"});
    this.profileEl = h("div", {class: "profile"});
    this.logs = new LogPane({
      multiHost: (job.ResourceConfig?.InstanceCount || 1) > 1,
      onOpen: (record) => this.openRecord({host: record.Host, record: record.Record}),
    });
    this.dialog = this.stopDialog();
    this.artifactsEl = this.artifactsPanel();
    clear(
      this.root,
      this.head,
      this.overview,
      h("section", {class: "panel"}, h("h2", {}, "Metrics"), this.overlayControl(), this.chartsEl),
      this.tables,
      this.rules.el,
      this.systemEl,
      this.profileEl,
      this.artifactsEl,
      this.logSection(),
      this.dialog,
    );
    this.showJob();
  }

  showJob() {
    const job = this.job;
    const stoppable = !TERMINAL.has(job.TrainingJobStatus) && job.TrainingJobStatus !== "Stopping";
    const tuning = tuningJobOf(job);
    clear(
      this.head,
      h(
        "div",
        {},
        h("a", {href: "/", class: "muted back"}, "← Jobs"),
        h("h1", {}, job.TrainingJobName),
        h(
          "div",
          {class: "status-line"},
          statusBadge(job.TrainingJobStatus),
          " ",
          h("span", {class: "secondary", "data-secondary": job.SecondaryStatus}, job.SecondaryStatus),
          tuning
            ? h(
                "span",
                {class: "tuning-of"},
                "· a trial of the tuning job ",
                h("a", {href: `/tuning/${encodeURIComponent(tuning)}`, name: "tuning-job"}, tuning),
              )
            : null,
        ),
      ),
      h(
        "div",
        {class: "actions"},
        h("a", {class: "button", href: `/compare?jobs=${encodeURIComponent(job.TrainingJobName)}`}, "Compare…"),
        hasReport(job)
          ? h(
              "a",
              {class: "button", name: "report", href: jobPath(job.TrainingJobName, "report"), target: "_blank"},
              "Profiling report",
            )
          : null,
        stoppable
          ? h("button", {type: "button", class: "danger", name: "stop", onclick: () => this.dialog.showModal()}, "Stop")
          : null,
      ),
    );
    const start = job.TrainingStartTime;
    const command = this.metrics.Command || [];
    clear(
      this.overview,
      h(
        "dl",
        {class: "facts"},
        fact("Created", fmtTime(job.CreationTime)),
        fact("Started", fmtTime(start)),
        fact("Ended", fmtTime(job.TrainingEndTime)),
        fact("Duration", this.duration()),
        fact("Instances", job.ResourceConfig?.InstanceCount ?? 1),
        fact("Max runtime", fmtDuration(job.StoppingCondition?.MaxRuntimeInSeconds)),
        this.metrics.Image ? fact("Image", h("code", {}, this.metrics.Image)) : null,
        fact("Command", h("code", {}, shellJoin(command))),
        this.metrics.WorkingDirectory ? fact("Directory", h("code", {}, this.metrics.WorkingDirectory)) : null,
      ),
      job.FailureReason ? h("div", {class: "failure"}, h("strong", {}, "Failure: "), job.FailureReason) : null,
      this.timeline(job),
    );
    this.showTables();
    this.rules.update(job);
  }

  duration() {
    const job = this.job;
    if (!job.TrainingStartTime) return "–";
    const end = job.TrainingEndTime || (TERMINAL.has(job.TrainingJobStatus) ? job.LastModifiedTime : Date.now() / 1000);
    return fmtDuration(end - job.TrainingStartTime);
  }

  timeline(job) {
    const transitions = job.SecondaryStatusTransitions || [];
    if (!transitions.length) return null;
    const now = Date.now() / 1000;
    const spans = transitions.map((t) =>
      Math.max(0, (t.EndTime ?? (TERMINAL.has(job.TrainingJobStatus) ? t.StartTime : now)) - t.StartTime),
    );
    const total = spans.reduce((a, b) => a + b, 0) || 1;
    return h(
      "div",
      {class: "timeline"},
      h(
        "div",
        {class: "timeline-bar"},
        transitions.map((t, i) =>
          h(
            "span",
            {
              class: "seg",
              "data-status": t.Status,
              style: `flex-grow:${Math.max(spans[i] / total, 0.02)}`,
              title: `${t.Status}: ${fmtDuration(spans[i])}`,
            },
            t.Status,
          ),
        ),
      ),
      table(
        ["Status", "Started", "Took", "Message"],
        transitions.map((t, i) => [
          t.Status,
          fmtTime(t.StartTime),
          t.EndTime === undefined ? "…" : fmtDuration(spans[i]),
          t.StatusMessage || "",
        ]),
        {class: "transitions"},
      ),
    );
  }

  showTables() {
    const job = this.job;
    const hps = Object.entries(job.HyperParameters || {});
    const finals = this.metrics.Metrics || []; // in the definitions' order, as the charts
    const definitions = job.AlgorithmSpecification?.MetricDefinitions || [];
    const diagnostics = this.metrics.Definitions || []; // in the definitions' order: names may repeat
    const warnings = this.metrics.Warnings || [];
    clear(
      this.tables,
      section(
        "Hyperparameters",
        hps.length ? table(["Name", "Value"], hps, {class: "hyperparameters"}) : h("p", {class: "muted"}, "None."),
      ),
      section(
        "Final metrics",
        finals.length
          ? table(
              ["Metric", "Last", "Min", "Max", "Count"],
              finals.map((m) => [m.MetricName, m.FinalValue, m.Minimum, m.Maximum, m.Points]),
              {class: "final-metrics"},
            )
          : h("p", {class: "muted"}, "No points yet."),
      ),
      this.foldedSection(
        "definitions",
        "Metric definitions",
        // open when something is to be seen: a warning, or a definition that matched nothing
        warnings.length > 0 || diagnostics.some((d) => d && !d.Matches),
        warningList(warnings),
        definitions.length
          ? h(
              "table",
              {class: "definitions"},
              h(
                "thead",
                {},
                h(
                  "tr",
                  {},
                  ["Name", "Regex", "Matches", "Rejected", "Near misses"].map((x) => h("th", {}, x)),
                ),
              ),
              h(
                "tbody",
                {},
                definitions.map((d, i) => definitionRow(d, diagnostics[i])),
              ),
            )
          : h("p", {class: "muted"}, "None: this job's log is not searched for metrics."),
      ),
    );
  }

  /** A panel folded below the charts: open as ``open`` says until the user opens or closes it. */
  foldedSection(key, title, open, ...children) {
    this.folded = this.folded || {};
    return foldedPanel(this.folded, key, open, {class: `panel ${key}-panel`}, h("h2", {}, title), ...children);
  }

  stopDialog() {
    return stopDialog({
      title: "Stop this job?",
      explanation: ["The job's processes get SIGTERM, then SIGKILL after the grace period. ", h("strong", {}, this.name),
        " will end as Stopped."],
      confirm: "Stop job",
      stop: () => post(jobPath(this.name, "stop")),
      done: () => this.refresh(),
    });
  }

  async refresh() {
    try {
      const answer = await get(jobPath(this.name));
      const seen = JSON.stringify(answer);
      if (this.disposed || seen === this.seen) return;
      this.seen = seen;
      this.job = answer.Job;
      this.metrics = answer.Metrics;
      this.showJob();
    } catch (exc) {
      if (exc.status === 404) this.gone();
    }
  }

  gone() {
    clear(this.head, h("h1", {}, this.name), h("p", {class: "error"}, "This job was deleted."));
  }

  // -- charts ---------------------------------------------------------------------------------

  metricNames() {
    return inDefinitionOrder([this.job], this.charts.keys());
  }

  chart(metric) {
    let chart = this.charts.get(metric);
    if (chart) return chart;
    chart = new Chart({
      key: metric,
      title: metric,
      sync: `job:${this.name}`,
      attrs: {"data-metric": metric},
      xMetrics: [],
      sources: [
        metricSource(this.name, metric, {origin: this.origin(), others: (m) => this.charts.get(m)?.sources[0].base}),
      ],
      onPoint: (point) => this.openRecord(point),
    });
    this.charts.set(metric, chart);
    const names = this.metricNames();
    const at = names.indexOf(metric);
    const next = names[at + 1] && this.charts.get(names[at + 1]);
    if (next && next.el.isConnected) this.chartsEl.insertBefore(chart.el, next.el);
    else this.chartsEl.append(chart.el);
    for (const c of this.charts.values()) c.setXMetrics(names);
    this.chartsEl.querySelector(".empty")?.remove();
    this.pairCharts(names);
    return chart;
  }

  // the metrics whose names pair (train and validation loss) on one chart too, before the others
  pairCharts(names) {
    for (const {base, members} of metricPairs(names)) this.overlay(base, members);
    this.offerOverlays(names);
  }

  /** One chart of several metrics (a series each), before the charts of one metric; ``chosen``
   * ones (from the Overlay control) can be closed. */
  overlay(base, members, chosen = false) {
    const known = this.overlays.get(base);
    if (known && known.members.join("\n") === members.join("\n")) return;
    if (known) {
      known.chart.el.remove();
      known.chart.destroy();
    }
    const chart = new Chart({
      key: `overlay:${base}`,
      title: members.join(" · "),
      sync: `job:${this.name}`,
      attrs: {"data-overlay": base},
      sources: members.map((m, i) =>
        metricSource(this.name, m, {origin: this.origin(), label: m, color: COLORS[i % COLORS.length]}),
      ),
      onPoint: (point) => this.openRecord(point),
    });
    this.overlays.set(base, {chart, members});
    if (chosen) {
      const close = h("button", {type: "button", class: "link", name: "close-overlay", title: "close this chart"}, "×");
      close.addEventListener("click", () => {
        chart.el.remove();
        chart.destroy();
        this.overlays.delete(base);
      });
      chart.el.querySelector(".chart-head")?.append(close);
    }
    const before = [...this.overlays.values()].filter((o) => o.chart !== chart && o.chart.el.isConnected).at(-1);
    this.chartsEl.insertBefore(chart.el, before ? before.chart.el.nextSibling : this.chartsEl.firstChild);
    chart.fetch();
  }

  // the Overlay control: any two (or more) metrics on one chart
  overlayControl() {
    this.overlayPick = h("select", {name: "overlay-metrics", multiple: true, size: 3, title: "metrics to draw together"});
    const draw = h("button", {type: "button", name: "overlay"}, "Overlay");
    draw.addEventListener("click", () => {
      const members = [...this.overlayPick.selectedOptions].map((o) => o.value);
      if (members.length < 2) return;
      this.overlay(members.join("+"), members, true);
    });
    this.overlayTools = h("div", {class: "toolbar overlay-tools", hidden: true},
      h("label", {}, "Overlay ", this.overlayPick), draw, h("span", {class: "muted"}, "(choose two or more)"));
    return this.overlayTools;
  }

  offerOverlays(names) {
    if (!this.overlayPick) return;
    const now = [...this.overlayPick.options].map((o) => o.value);
    if (JSON.stringify(now) !== JSON.stringify(names))
      this.overlayPick.replaceChildren(...names.map((n) => h("option", {value: n}, n)));
    this.overlayTools.hidden = names.length < 2;
  }

  async loadCharts({Metrics: metrics}) {
    const names = (metrics.Metrics || []).filter((m) => m.Points > 0).map((m) => m.MetricName);
    if (!names.length)
      this.chartsEl.append(h("p", {class: "muted empty"}, "No points yet: charts appear as the job prints metrics."));
    const charts = names.map((n) => this.chart(n));
    await Promise.all(charts.map((c) => c.fetch()));
  }

  onPoints(news) {
    for (const [metric, payload] of Object.entries(news)) {
      const points = series(payload);
      const known = this.charts.get(metric);
      const chart = known || this.chart(metric);
      const added = chart.append(0, points);
      if (!known) chart.fetch();
      for (const {chart: overlay, members} of this.overlays.values()) {
        const at = members.indexOf(metric);
        if (at >= 0) overlay.append(at, points);
      }
      this.updateFinal(metric, points, added);
    }
    for (const chart of this.charts.values()) for (const metric of Object.keys(news)) chart.dependencyChanged(metric);
    this.showTablesSoon();
  }

  /** A metric's final value, minimum, maximum and count, kept current from the ``added`` new points
   * at the end of ``points`` (the server's numbers come at each refresh). */
  updateFinal(metric, points, added) {
    const finals = this.metrics.Metrics || (this.metrics.Metrics = []);
    let row = finals.find((m) => m.MetricName === metric);
    if (!row) finals.push((row = {MetricName: metric, Points: 0}));
    for (let j = points.t.length - added; j < points.t.length; j++) {
      row.Points++;
      const value = points.v[j];
      row.FinalValue = points.k[j] || value;
      if (value === null) continue;
      if (typeof row.Minimum !== "number" || value < row.Minimum) row.Minimum = value;
      if (typeof row.Maximum !== "number" || value > row.Maximum) row.Maximum = value;
    }
  }

  async loadSystem() {
    let answer;
    try {
      answer = await get(jobPath(this.name, "system"));
    } catch {
      return;
    }
    if (this.disposed) return;
    if (!(answer.Metrics || []).length) {
      // none sampled yet
      if (!TERMINAL.has(this.job.TrainingJobStatus)) this.timers.push(setTimeout(() => this.loadSystem(), 10000));
      return;
    }
    // one chart per metric, a series per host
    const byMetric = new Map();
    const units = new Map();
    for (const m of answer.Metrics) {
      if (!byMetric.has(m.MetricName)) byMetric.set(m.MetricName, []);
      byMetric.get(m.MetricName).push(m.Host);
      units.set(m.MetricName, m.Unit);
    }
    const grid = h("div", {class: "system-grid"});
    const hosts = new Set(answer.Metrics.map((m) => m.Host));
    clear(
      this.systemEl,
      h(
        "section",
        {class: "panel"},
        h("h2", {}, "System metrics", h("span", {class: "muted"}, ` · ${[...hosts].sort().join(", ")}`)),
        grid,
      ),
    );
    for (const [metric, names] of [...byMetric].sort(([a], [b]) => a.localeCompare(b))) {
      const chart = new Chart({
        key: `system:${metric}`,
        title: metric,
        unit: units.get(metric),
        sync: `job:${this.name}`,
        compact: true,
        attrs: {"data-system": metric},
        sources: names.sort().map((host) => systemSource(this.name, host, metric, this.origin())),
      });
      this.systemCharts.push(chart);
      grid.append(chart.el);
      chart.fetch();
    }
    // system metrics are not in the live stream: look again now and then while the job runs
    this.timers.push(
      setInterval(() => {
        if (TERMINAL.has(this.job.TrainingJobStatus)) return;
        for (const chart of this.systemCharts) if (!chart.view) chart.fetch();
      }, 10000),
    );
  }

  async loadProfile() {
    let answer;
    try {
      answer = await get(jobPath(this.name, "profile"));
    } catch {
      return; // no profiler: nothing to show
    }
    const rows = answer.Metrics || [];
    if (this.disposed || !rows.length) return;
    const grid = h("div", {class: "system-grid"});
    clear(
      this.profileEl,
      h(
        "details",
        {class: "panel profile"}, // folded below the charts: open it to see every metric
        h(
          "summary",
          {},
          h(
            "h2",
            {},
            `Profile (every ${answer.IntervalMilliseconds} ms)`,
            h("span", {class: "muted"}, ` · ${rows.length} metrics`),
          ),
        ),
        table(
          ["Host", "Metric", "Samples", "Min", "p50", "p95", "p99", "Max"],
          rows.map((r) => [r.host, r.metric, r.samples, ...[r.min, r.p50, r.p95, r.p99, r.max].map((v) => fmtUnit(v, r.unit))]),
          {class: "profile-table"},
        ),
        grid,
      ),
    );
    // every sample, at the profiler's own resolution: a chart per metric, a series per host
    const byMetric = new Map();
    const units = new Map(rows.map((r) => [r.metric, r.unit]));
    for (const r of rows) byMetric.set(r.metric, [...(byMetric.get(r.metric) || []), r.host]);
    for (const [metric, hosts] of [...byMetric].sort(([a], [b]) => a.localeCompare(b))) {
      const chart = new Chart({
        key: `profile:${metric}`,
        title: metric,
        unit: units.get(metric),
        sync: `job:${this.name}`,
        compact: true,
        attrs: {"data-profile": metric},
        sources: hosts.sort().map((host) => profileSource(this.name, host, metric, this.origin())),
      });
      this.systemCharts.push(chart);
      grid.append(chart.el);
      chart.fetch();
    }
  }

  // -- the log --------------------------------------------------------------------------------

  // -- artifacts: model.tar.gz, output.tar.gz, checkpoints and channel inputs, read when opened

  artifactsPanel() {
    const body = h("div", {class: "artifacts-body"}, h("p", {class: "muted"}, "Reading…"));
    const panel = h(
      "details",
      {class: "panel artifacts", ontoggle: () => panel.open && this.showArtifacts(body)},
      h("summary", {}, h("h2", {}, "Artifacts")),
      body,
    );
    return panel;
  }

  async showArtifacts(body) {
    const download = (params) => {
      const url = new URL(jobPath(this.name, "artifacts", "file"), location.origin);
      for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
      return url.pathname + url.search;
    };
    let answer;
    try {
      answer = await get(jobPath(this.name, "artifacts"));
    } catch (exc) {
      clear(body, h("p", {class: "error"}, exc.message));
      return;
    }
    const rows = answer.Artifacts.map((a) => {
      const archive = a.Name.endsWith(".tar.gz") && a.Available !== false;
      const members = h("div", {class: "members"});
      return h(
        "tr",
        {"data-artifact": a.Id},
        h("td", {}, a.Kind === "Channel" ? `Channel ${a.Channel}` : a.Kind),
        h("td", {}, h("code", {}, a.Name), members),
        h("td", {class: "num"}, a.Available === false ? "–" : fmtBytes(a.Size)),
        h(
          "td",
          {class: "artifact-actions"},
          a.Available === false
            ? h("span", {class: "muted"}, "not written yet")
            : h("a", {href: download({artifact: a.Id}), download: "", name: "download"}, "Download"),
          archive
            ? h(
                "button",
                {type: "button", class: "link", name: "browse", onclick: () => this.showMembers(a, members, download)},
                "Browse",
              )
            : null,
        ),
        h("td", {class: "muted location"}, a.Location),
      );
    });
    clear(
      body,
      rows.length
        ? h(
            "table",
            {class: "artifacts"},
            h("thead", {}, h("tr", {}, ["Kind", "Name", "Size", "", "Kept at"].map((x) => h("th", {}, x)))),
            h("tbody", {}, rows),
          )
        : h("p", {class: "muted"}, "None yet."),
      (answer.Truncated || []).length
        ? h("p", {class: "muted"}, `Only the first 1,000 files of ${answer.Truncated.join(", ")} are listed.`)
        : null,
    );
  }

  async showMembers(artifact, into, download) {
    if (into.childElementCount) return clear(into);
    try {
      const answer = await get(jobPath(this.name, "artifacts", "members"), {artifact: artifact.Id});
      clear(
        into,
        h(
          "ul",
          {class: "archive-members"},
          answer.Members.map((m) =>
            h(
              "li",
              {"data-member": m.Name},
              m.Type === "file"
                ? h("a", {href: download({artifact: artifact.Id, member: m.Name}), download: ""}, m.Name)
                : `${m.Name}${m.Type === "directory" ? "/" : ""}`,
              m.Type === "file" ? h("span", {class: "muted"}, ` ${fmtBytes(m.Size)}`) : null,
            ),
          ),
        ),
        answer.Truncated ? h("p", {class: "muted"}, "Only the first 10,000 members are listed.") : null,
      );
    } catch (exc) {
      clear(into, h("p", {class: "error"}, exc.message));
    }
  }

  logSection() {
    const input = h("input", {type: "search", name: "log-search", placeholder: "Search the log"});
    const regex = h("input", {type: "checkbox", name: "log-regex"});
    const error = h("span", {class: "error log-error"});
    const search = async () => {
      error.textContent = "";
      const text = input.value;
      if (!text) return this.logs.showResults(null);
      try {
        const answer = await get(jobPath(this.name, "logs"), {[regex.checked ? "regex" : "text"]: text, limit: 1000});
        this.logs.showResults(
          answer.Records,
          `${answer.Records.length} matching record${answer.Records.length === 1 ? "" : "s"}` +
            (answer.Complete ? "" : ` (searched ${answer.Scanned} records)`),
        );
      } catch (exc) {
        error.textContent = exc.message;
      }
    };
    input.addEventListener("keydown", (e) => e.key === "Enter" && search());
    input.addEventListener("search", () => !input.value && this.logs.showResults(null));
    return h(
      "section",
      {class: "panel logs"},
      h(
        "div",
        {class: "log-head"},
        h("h2", {}, "Log"),
        h(
          "div",
          {class: "log-tools"},
          input,
          h("label", {}, regex, " regex"),
          h("button", {type: "button", name: "search", onclick: search}, "Search"),
          h(
            "label",
            {},
            h("input", {
              type: "checkbox",
              name: "log-times",
              onchange: (e) => this.logs.box.classList.toggle("times", e.target.checked),
            }),
            " times",
          ),
          h("a", {class: "button", name: "log-download", href: jobPath(this.name, "log.txt"), download: ""}, "Download"),
          h(
            "button",
            {
              type: "button",
              name: "clear",
              onclick: () => {
                input.value = "";
                error.textContent = "";
                this.logs.showResults(null);
              },
            },
            "Live tail",
          ),
          this.logs.status,
          error,
        ),
      ),
      this.logs.record,
      this.logs.box,
    );
  }

  async loadLog() {
    try {
      const answer = await get(jobPath(this.name, "logs"), {tail: LOG_TAIL, limit: 2000});
      this.after = answer.After;
      this.logs.append(answer.Records);
    } catch (exc) {
      this.logs.status.textContent = exc.message;
    }
  }

  async openRecord(point) {
    try {
      this.logs.showRecord(
        await get(jobPath(this.name, "record"), {
          stream: point.stream,
          host: point.stream === undefined ? point.host : undefined,
          record: point.record,
          context: 10,
        }),
      );
    } catch (exc) {
      this.logs.status.textContent = exc.message;
    }
  }

  // -- live -----------------------------------------------------------------------------------

  /** The time to ask for points after: the newest point the charts have, less a margin for points
   * stored late (another host's, say); the charts drop the ones they have. (The oldest of the
   * charts' last points would do too, but a metric printed once at the start would then have the
   * whole history sent again at each connection.) */
  since() {
    let since = -Infinity;
    for (const chart of this.charts.values()) {
      const base = chart.sources[0].base;
      if (base && base.t.length) since = Math.max(since, base.t[base.t.length - 1]);
    }
    // No points yet: whatever was stored before the page opened, the charts' first fetch has.
    return Math.max(0, (Number.isFinite(since) ? since : this.openedAt) - 5000);
  }

  follow() {
    if (TERMINAL.has(this.job.TrainingJobStatus)) return; // all there is was read
    this.stream = liveStream(
      () => {
        const params = new URLSearchParams({since: this.since()});
        if (this.after) params.set("after", JSON.stringify(this.after));
        return `${jobPath(this.name, "events")}?${params}`;
      },
      {
        status: (status) => {
          Object.assign(this.job, status);
          this.showJob();
          this.refreshSoon();
        },
        points: (news) => this.onPoints(news),
        definitions: ({Definitions}) => {
          this.metrics.Definitions = Definitions;
          this.showTablesSoon();
        },
        rules: (statuses) => {
          Object.assign(this.job, statuses);
          this.rules.update(this.job);
        },
        log: ({Records, After}) => {
          this.after = After;
          this.logs.append(Records);
        },
        end: () => this.refresh(),
        deleted: () => this.gone(),
      },
    );
  }
}

function fact(label, value) {
  return h("div", {}, h("dt", {}, label), h("dd", {"data-fact": label}, value));
}

function definitionRow(definition, stats = {}) {
  const rejected = Object.entries(stats.Rejected || {});
  return h(
    "tr",
    {"data-definition": definition.Name},
    h("td", {}, definition.Name),
    h("td", {}, h("code", {}, definition.Regex)),
    h(
      "td",
      {class: "num"},
      fmtNum(stats.Matches ?? 0),
      stats.NonFinite ? h("div", {class: "muted small"}, `${stats.NonFinite} non-finite`) : null,
    ),
    h(
      "td",
      {},
      rejected.length ? rejected.map(([why, n]) => h("div", {}, `${n} × ${why}`)) : "–",
      (stats.RejectedExamples || []).slice(0, 3).map((x) => h("div", {}, h("code", {class: "example"}, x))),
    ),
    h(
      "td",
      {},
      (stats.UnmatchedExamples || []).length
        ? stats.UnmatchedExamples.slice(0, 3).map((x) => h("div", {}, h("code", {class: "example"}, x)))
        : "–",
    ),
  );
}
