// A tuning job's page: its status, strategy, objective, limits and counters (and Stop while it
// runs), its best training job, every trial's objective against time (a line per trial, in the
// compare page's colours) and each trial's final objective by its number with the best so far, the
// tuned hyperparameters against the objective (parallel coordinates and a scatter), and the trials'
// table, sortable; live while the tuning job is InProgress or Stopping.

import {liveStream} from "./api.js";
import {Chart, PlotChart, COLORS} from "./chart.js";
import {h, clear, fmtNum, fmtTime, fmtDuration, statusBadge, breakable, section, throttle, TERMINAL, stopDialog} from "./dom.js";
import {metricSource} from "./job.js";
import {parallelCoordinates, scatterPlot} from "./parallel.js";
import {ACTIVE, POLL_MS, sagemaker, objectiveText, countersText, objectivesText, countersBar} from "./tuning-jobs.js";

const PAGE = 100; // ListTrainingJobsForHyperParameterTuningJob's most a page
const POINTS_BUDGET = 3000; // buckets of every trial's line together, at most (a bucket: up to 4 points)
const LEGEND_MOST = 12; // trials named in the objective chart's legend, at most

export function mount(root, {name}) {
  const page = new TuningPage(root, name);
  page.start();
  return () => page.dispose();
}

/** A trial's number, from its name ("NAME-007-1a2b3c4d"); ``fallback`` when it has none. */
export function trialNumber(trialName, fallback) {
  const found = /-(\d{3,})-[0-9a-z]+$/i.exec(trialName);
  return found ? Number(found[1]) : fallback;
}

const objectiveOf = (trial) => trial.FinalHyperParameterTuningJobObjectiveMetric?.Value ?? null;

class TuningPage {
  constructor(root, name) {
    this.root = root;
    this.name = name;
    this.disposed = false;
    this.seen = "";
    this.trials = [];
    this.sort = null; // {key, descending}: the objective's best first until a header is clicked
    this.sources = new Map(); // trial -> its chart source, kept across refreshes (its cache with it)
    this.refreshSoon = throttle(() => this.refresh(), 1000);
  }

  async start() {
    document.title = `${this.name} · tuning · trainmon`;
    clear(this.root, h("p", {class: "muted"}, "Loading…"));
    let answer;
    try {
      answer = await this.read();
    } catch (exc) {
      clear(
        this.root,
        h("a", {href: "/tuning", class: "muted back"}, "← Tuning jobs"),
        h("h1", {}, this.name),
        h("p", {class: "error"}, exc.message),
      );
      return;
    }
    if (this.disposed) return;
    this.build();
    this.show(answer);
    this.follow();
  }

  dispose() {
    this.disposed = true;
    clearTimeout(this.timer);
    this.refreshSoon.cancel();
    if (this.stream) this.stream.close();
    if (this.chart) this.chart.destroy();
    if (this.finals) this.finals.destroy();
  }

  /** The description and every trial (in pages), in the order they were started: asked for together,
   * and either one's error is the answer (the other's, later, is not left unhandled). */
  async read() {
    const trials = async () => {
      const found = [];
      let token = null;
      do {
        const answer = await sagemaker("ListTrainingJobsForHyperParameterTuningJob", {
          HyperParameterTuningJobName: this.name,
          SortBy: "CreationTime",
          SortOrder: "Ascending",
          MaxResults: PAGE,
          NextToken: token || undefined,
        });
        found.push(...answer.TrainingJobSummaries);
        token = answer.NextToken;
      } while (token);
      return found;
    };
    const [described, listed] = await Promise.all([
      sagemaker("DescribeHyperParameterTuningJob", {HyperParameterTuningJobName: this.name}),
      trials(),
    ]);
    return {described, trials: listed};
  }

  async refresh() {
    let answer;
    try {
      answer = await this.read();
    } catch (exc) {
      if (!this.disposed) this.error.textContent = exc.message;
      return;
    }
    if (!this.disposed) this.show(answer);
  }

  /** Live while the tuning job is active: asked again every POLL_MS, and soon after one of its
   * trials changes (a status, a new objective point: the jobs' live stream). */
  follow() {
    if (!ACTIVE.has(this.described.HyperParameterTuningJobStatus)) return;
    const tick = async () => {
      await this.refresh();
      if (this.disposed) return;
      if (ACTIVE.has(this.described.HyperParameterTuningJobStatus)) this.timer = setTimeout(tick, POLL_MS);
      else if (this.stream) this.stream.close();
    };
    this.timer = setTimeout(tick, POLL_MS);
    this.stream = liveStream(
      () => "/api/events",
      {
        job: (summary) => {
          if (this.isTrial(summary.TrainingJobName)) this.refreshSoon();
        },
      },
      {closeOn: []},
    );
  }

  /** Whether a training job's name is one of this tuning job's trials' ("NAME-NNN-xxxxxxxx"). */
  isTrial(jobName) {
    const prefix = `${this.name}-`;
    return jobName.startsWith(prefix) && /^\d{3,}-[0-9a-z]+$/i.test(jobName.slice(prefix.length));
  }

  // -- the page -------------------------------------------------------------------------------

  build() {
    this.head = h("div", {class: "job-head"});
    this.overview = h("div", {class: "job-overview"});
    this.error = h("p", {class: "error"});
    this.bestEl = h("div");
    this.objectiveBox = h("div", {class: "charts tuning-charts"});
    this.relationsEl = h("div");
    this.tableTitle = h("h2", {}, "Training jobs");
    this.tableEl = h("table", {class: "jobs trials"});
    this.dialog = this.stopDialog();
    clear(
      this.root,
      this.head,
      this.overview,
      this.error,
      this.bestEl,
      h("section", {class: "panel"}, h("h2", {}, "Objective"), this.objectiveBox),
      section("Hyperparameters against the objective", this.relationsEl),
      h("section", {class: "panel"}, this.tableTitle, h("div", {class: "table-wrap flat"}, this.tableEl)),
      this.dialog,
    );
  }

  show({described, trials}) {
    const seen = JSON.stringify([described, trials]);
    if (seen === this.seen) {
      // the same summaries: only the lines of the trials that run grew
      if (this.trials.some((t) => !TERMINAL.has(t.TrainingJobStatus)) && !this.chart.view) this.chart.fetch();
      return;
    }
    const before = this.trials;
    this.seen = seen;
    this.described = described;
    this.error.textContent = "";
    // in the order they were started, each with its number and its colour
    this.trials = trials
      .map((t, i) => ({...t, number: trialNumber(t.TrainingJobName, i + 1)}))
      .sort((a, b) => a.number - b.number);
    this.trials.forEach((t, i) => (t.color = COLORS[i % COLORS.length]));
    this.best = described.BestTrainingJob?.TrainingJobName || null;
    this.showHead();
    this.showBest();
    this.showCharts(before);
    this.showRelations();
    this.showTable();
  }

  config() {
    return this.described.HyperParameterTuningJobConfig || {};
  }

  minimize() {
    return objectiveText(this.described).startsWith("Minimize");
  }

  metricName() {
    const goal = this.config().HyperParameterTuningJobObjective ||
      (this.described.TrainingJobDefinitions || [])[0]?.TuningObjective;
    return goal?.MetricName || "objective";
  }

  showHead() {
    const d = this.described;
    const config = this.config();
    const limits = config.ResourceLimits || {};
    const status = d.HyperParameterTuningJobStatus;
    clear(
      this.head,
      h(
        "div",
        {},
        h("a", {href: "/tuning", class: "muted back"}, "← Tuning jobs"),
        h("h1", {}, d.HyperParameterTuningJobName),
        h(
          "div",
          {class: "status-line"},
          statusBadge(status),
          " ",
          h("span", {"data-strategy": config.Strategy}, `${config.Strategy} search`),
        ),
      ),
      h(
        "div",
        {class: "actions"},
        status === "InProgress"
          ? h("button", {type: "button", class: "danger", name: "stop", onclick: () => this.dialog.showModal()}, "Stop")
          : null,
      ),
    );
    const end = d.HyperParameterTuningEndTime;
    const details = d.TuningJobCompletionDetails || {};
    const criteria = config.TuningJobCompletionCriteria;
    clear(
      this.overview,
      h(
        "dl",
        {class: "facts"},
        fact("Objective", objectiveText(d)),
        fact("Strategy", config.Strategy),
        fact("Created", fmtTime(d.CreationTime)),
        fact("Ended", fmtTime(end)),
        fact("Runtime", fmtDuration(d.ConsumedResources?.RuntimeInSeconds ?? (end ?? Date.now() / 1000) - d.CreationTime)),
        fact("Limits", limitsText(limits)),
        fact("Training jobs", countersText(d.TrainingJobStatusCounters, limits)),
        fact("Objectives", objectivesText(d.ObjectiveStatusCounters)),
        fact("Early stopping", config.TrainingJobEarlyStoppingType || "Off"),
        config.RandomSeed !== undefined ? fact("Random seed", config.RandomSeed) : null,
        criteria ? fact("Completion criteria", criteriaText(criteria)) : null,
        details.NumberOfTrainingJobsObjectiveNotImproving !== undefined && d.BestTrainingJob
          ? fact("Not improving", plural(details.NumberOfTrainingJobsObjectiveNotImproving, "training job") +
              " since the best")
          : null,
        details.ConvergenceDetectedTime ? fact("Converged", fmtTime(details.ConvergenceDetectedTime)) : null,
        d.WarmStartConfig
          ? fact(
              "Warm start",
              d.WarmStartConfig.WarmStartType,
              " from ",
              d.WarmStartConfig.ParentHyperParameterTuningJobs.map((p, i) => [
                i ? ", " : "",
                h("a", {href: `/tuning/${encodeURIComponent(p.HyperParameterTuningJobName)}`},
                  p.HyperParameterTuningJobName),
              ]),
            )
          : null,
      ),
      countersBar(d.TrainingJobStatusCounters, limits),
      d.FailureReason ? h("div", {class: "failure"}, h("strong", {}, "Failure: "), d.FailureReason) : null,
    );
  }

  showBest() {
    const best = this.described.BestTrainingJob;
    if (!best) {
      clear(this.bestEl);
      return;
    }
    const metric = best.FinalHyperParameterTuningJobObjectiveMetric || {};
    clear(
      this.bestEl,
      h(
        "section",
        {class: "panel best-trial", "data-best": best.TrainingJobName},
        h("h2", {}, "Best training job"),
        h(
          "div",
          {class: "best-line"},
          h("a", {href: `/jobs/${encodeURIComponent(best.TrainingJobName)}`, name: "best-trial"}, best.TrainingJobName),
          h("span", {class: "best-value"}, `${metric.MetricName} ${fmtNum(metric.Value)}`),
          statusBadge(best.TrainingJobStatus),
        ),
        h(
          "div",
          {class: "best-hyperparameters"},
          Object.entries(best.TunedHyperParameters || {}).map(([k, v]) => h("code", {}, `${k}=${v}`)),
        ),
      ),
    );
  }

  // -- charts ---------------------------------------------------------------------------------

  /** Trial ``t``'s line on the objective chart: the batched points of its objective metric, each
   * trial's asked as one of a few requests; a trial that has ended keeps what it got. */
  source(t) {
    const known = this.sources.get(t.TrainingJobName);
    const origin = 1000 * (t.TrainingStartTime || t.CreationTime);
    if (known) {
      Object.assign(known, {origin, color: t.color, ended: TERMINAL.has(t.TrainingJobStatus)});
      return known;
    }
    const buckets = (width) =>
      Math.max(4, Math.min(Math.ceil(width / 3), Math.floor(POINTS_BUDGET / Math.max(1, this.trials.length))));
    const spec = metricSource(t.TrainingJobName, this.metricName(), {
      origin, label: t.TrainingJobName, color: t.color, overlaid: true, buckets});
    let kept = null;
    const source = {
      ...spec,
      ended: TERMINAL.has(t.TrainingJobStatus),
      points: async (start, end, width) => {
        if (start !== undefined || end !== undefined) return spec.points(start, end, width);
        if (kept && kept.width === width) return kept.answer;
        const ended = source.ended; // as it was before asking: every point is stored
        const answer = await spec.points(start, end, width);
        if (ended) kept = {width, answer};
        return answer;
      },
    };
    this.sources.set(t.TrainingJobName, source);
    return source;
  }

  showCharts(before) {
    const names = this.trials.map((t) => t.TrainingJobName);
    const sources = this.trials.map((t) => this.source(t));
    const changed = names.join("\n") !== before.map((t) => t.TrainingJobName).join("\n");
    if (!this.chart) {
      this.chart = new Chart({
        key: "tuning:objective",
        title: `${this.metricName()} of every training job`,
        attrs: {"data-tuning-chart": "objective"},
        sources,
        legend: (n) => n <= LEGEND_MOST,
      });
      this.finals = new PlotChart({
        key: "tuning:finals",
        title: `Final ${this.metricName()} by training job`,
        xLabel: "training job",
        integerX: true,
        attrs: {"data-tuning-chart": "finals"},
      });
      this.objectiveBox.replaceChildren(this.chart.el, this.finals.el);
      this.chart.fetch();
    } else if (changed) {
      this.chart.setSources(sources);
    } else if (!this.chart.view) {
      this.chart.fetch(); // the ended trials' lines come from what they got
    }
    this.chart.el.querySelector("h3").textContent =
      `${this.metricName()} of every training job` + (names.length > LEGEND_MOST ? ` (${names.length})` : "");
    this.showFinals();
  }

  /** Each trial's final objective by its number, in its colour, and the best so far as a step. */
  showFinals() {
    const minimize = this.minimize();
    let best = null;
    const values = this.trials.map(objectiveOf);
    const running = values.map((v) => {
      if (v !== null && (best === null || (minimize ? v < best : v > best))) best = v;
      return best;
    });
    const with_ = values.filter((v) => v !== null).length;
    this.finals.set(
      this.trials.map((t) => t.number),
      [
        {label: `final ${this.metricName()}`, kind: "points", color: "#6b7280", colors: this.trials.map((t) => t.color),
          values},
        {label: `best so far (${minimize ? "least" : "greatest"})`, kind: "step", color: "#059669", values: running},
      ],
      `${with_} of ${this.trials.length} with a final objective`,
    );
  }

  // -- hyperparameters against the objective ---------------------------------------------------

  /** The tuned hyperparameters, in the order of the ranges (then any other a trial has), each with
   * its range: an axis from MinValue to MaxValue (logarithmic as its scaling says), or its values. */
  tuned() {
    const found = new Map();
    const definitions = this.described.TrainingJobDefinitions || [this.described.TrainingJobDefinition || {}];
    const sets = [this.config().ParameterRanges, ...definitions.map((d) => d.HyperParameterRanges)];
    for (const set of sets.filter(Boolean)) {
      for (const r of set.IntegerParameterRanges || []) found.set(r.Name, numericRange(r));
      for (const r of set.ContinuousParameterRanges || []) found.set(r.Name, numericRange(r));
      for (const r of set.CategoricalParameterRanges || []) found.set(r.Name, {categories: r.Values});
    }
    for (const t of this.trials) for (const k of Object.keys(t.TunedHyperParameters || {})) if (!found.has(k)) found.set(k, null);
    return [...found.entries()].map(([name, range]) => ({name, range}));
  }

  showRelations() {
    const tuned = this.tuned();
    const trials = this.trials;
    const metric = this.metricName();
    const open = this.scatterOf || tuned[0]?.name;
    const lines = trials.map((t) => ({
      name: t.TrainingJobName,
      color: t.color,
      width: t.TrainingJobName === this.best ? 4 : 2,
      dashed: objectiveOf(t) === null,
      title: `${t.TrainingJobName}: ${metric} ${fmtNum(objectiveOf(t))}`,
    }));
    const column = ({name, range}) => ({
      name,
      range,
      values: trials.map((t) => (t.TunedHyperParameters || {})[name]),
    });
    const objective = {name: metric, values: trials.map(objectiveOf), metric: true};
    const pick = h(
      "select",
      {name: "relation-hyperparameter", onchange: (e) => ((this.scatterOf = e.target.value), this.showRelations())},
      tuned.map((c) => h("option", {value: c.name, selected: c.name === open}, c.name)),
    );
    const chosen = tuned.find((c) => c.name === open) || tuned[0];
    clear(
      this.relationsEl,
      trials.length
        ? [
            h("div", {class: "toolbar"}, h("label", {}, "Scatter of ", pick), h("span", {class: "muted"},
              "the best training job's line is the widest; a dashed one has no final objective")),
            h(
              "div",
              {class: "relations"},
              h("div", {class: "parallel"}, parallelCoordinates([...tuned.map(column), objective], lines)),
              chosen ? h("div", {class: "scatter"}, scatterPlot(column(chosen), objective, lines)) : null,
            ),
          ]
        : h("p", {class: "muted"}, "No training job yet."),
    );
  }

  // -- the trials -----------------------------------------------------------------------------

  columns() {
    const metric = this.metricName();
    const numeric = new Set(this.tuned().filter((c) => c.range && !c.range.categories).map((c) => c.name));
    return [
      {key: "number", label: "#", num: true, value: (t) => t.number},
      {key: "name", label: "Training job", value: (t) => t.TrainingJobName},
      {key: "status", label: "Status", value: (t) => t.TrainingJobStatus},
      {key: "objective-status", label: "Objective status", value: (t) => t.ObjectiveStatus},
      {key: "objective", label: metric, num: true, value: objectiveOf},
      ...this.tuned().map(({name}) => ({
        key: `hyper:${name}`,
        label: name,
        num: numeric.has(name),
        value: (t) => {
          const v = (t.TunedHyperParameters || {})[name];
          return numeric.has(name) && v !== undefined ? Number(v) : v;
        },
      })),
      {key: "duration", label: "Duration", num: true, value: duration},
    ];
  }

  sorted(cols) {
    const sort = this.sort || {key: "objective", descending: !this.minimize()};
    const col = cols.find((c) => c.key === sort.key) || cols[0];
    const missing = (v) => v === null || v === undefined || Number.isNaN(v);
    const rows = [...this.trials].sort((a, b) => {
      const x = col.value(a),
        y = col.value(b);
      if (missing(x) || missing(y)) return missing(x) - missing(y) || a.number - b.number; // missing last, either way
      const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return (sort.descending ? -order : order) || a.number - b.number;
    });
    return {sort, rows};
  }

  showTable() {
    const cols = this.columns();
    const {sort, rows} = this.sorted(cols);
    const status = this.described.HyperParameterTuningJobStatus;
    const wholeStopped = status === "Stopping" || status === "Stopped";
    const early = this.config().TrainingJobEarlyStoppingType === "Auto" && !wholeStopped;
    this.tableTitle.textContent = `Training jobs (${this.trials.length})`;
    clear(
      this.tableEl,
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          cols.map((c) =>
            h(
              "th",
              {
                "data-sort": c.key,
                class: c.num ? "num sortable" : "sortable",
                "aria-sort": c.key === sort.key ? (sort.descending ? "descending" : "ascending") : "none",
                onclick: () => {
                  // a column clicked again turns; another starts with the best (or least) first
                  const first = c.key === "objective" ? !this.minimize() : false;
                  this.sort = {key: c.key, descending: c.key === sort.key ? !sort.descending : first};
                  this.showTable();
                },
              },
              breakable(c.label),
              c.key === sort.key ? (sort.descending ? "\u00a0▾" : "\u00a0▴") : "",
            ),
          ),
        ),
      ),
      h(
        "tbody",
        {},
        rows.length
          ? rows.map((t) => this.row(t, cols, early))
          : h("tr", {}, h("td", {colspan: cols.length, class: "muted empty"}, "No training job yet.")),
      ),
    );
  }

  row(t, cols, early) {
    const objective = objectiveOf(t);
    const stopped = t.TrainingJobStatus === "Stopped";
    const classes = [t.TrainingJobName === this.best ? "best" : "", stopped ? "stopped" : ""].filter(Boolean).join(" ");
    const cell = {
      number: () =>
        h(
          "td",
          {class: "num"},
          t.TrainingJobName === this.best ? h("span", {class: "best-mark", title: "the best training job"}, "★ ") : null,
          h("span", {class: "swatch", style: `background:${t.color}`}),
          ` ${t.number}`,
        ),
      name: () =>
        h("td", {}, h("a", {href: `/jobs/${encodeURIComponent(t.TrainingJobName)}`, name: "trial"}, t.TrainingJobName)),
      status: () =>
        h(
          "td",
          {"data-col": "status"},
          statusBadge(t.TrainingJobStatus),
          stopped
            ? h(
                "span",
                {
                  class: "stopped-mark",
                  "data-stopped": early ? "early" : "stopped",
                  title: early
                    ? "stopped while the tuning job went on: stopped early (or by hand)"
                    : "stopped with the tuning job, early, or by hand",
                },
                early ? "stopped early" : "stopped",
              )
            : null,
          t.FailureReason ? h("div", {class: "muted small failure-reason", title: t.FailureReason}, t.FailureReason) : null,
        ),
      "objective-status": () => h("td", {"data-col": "objective-status"}, t.ObjectiveStatus),
      objective: () => h("td", {class: "num", "data-col": "objective"}, fmtNum(objective)),
      duration: () =>
        h(
          "td",
          {
            class: "num",
            "data-col": "duration",
            title: t.TrainingStartTime
              ? `started ${fmtTime(t.TrainingStartTime)}, ${fmtDuration(t.TrainingStartTime - this.described.CreationTime)} ` +
                "after the tuning job"
              : "not started yet",
          },
          fmtDuration(duration(t)),
        ),
    };
    return h(
      "tr",
      {"data-trial": t.TrainingJobName, "data-objective": objective ?? "", class: classes || null},
      cols.map((c) => (cell[c.key] ? cell[c.key]() : hyperparameterCell(c, (t.TunedHyperParameters || {})[c.label]))),
    );
  }

  stopDialog() {
    return stopDialog({
      title: "Stop this tuning job?",
      explanation: ["No more training jobs start, and those running are stopped. ", h("strong", {}, this.name),
        " will end as Stopped; its training jobs stay."],
      confirm: "Stop tuning job",
      stop: () => sagemaker("StopHyperParameterTuningJob", {HyperParameterTuningJobName: this.name}),
      done: () => this.refresh(),
    });
  }
}

/** A tuned value: a number as people read it (the exact text the job got in its title). */
function hyperparameterCell(c, value) {
  if (value === undefined) return h("td", {"data-hyperparameter": c.label}, "–");
  const shown = c.num && Number.isFinite(Number(value)) ? fmtNum(Number(value)) : value;
  return h("td", {class: c.num ? "num" : null, "data-hyperparameter": c.label, title: value}, shown);
}

const plural = (n, noun) => `${n} ${noun}${n === 1 ? "" : "s"}`;

function fact(label, ...value) {
  return h("div", {}, h("dt", {}, label), h("dd", {"data-fact": label}, ...value));
}

function duration(t) {
  if (!t.TrainingStartTime) return null;
  const end = t.TrainingEndTime ?? (TERMINAL.has(t.TrainingJobStatus) ? null : Date.now() / 1000);
  return end === null ? null : end - t.TrainingStartTime;
}

/** An integer's or continuous range's axis: MinValue to MaxValue, on the scale its values are drawn
 * on (logarithmic for Logarithmic; Auto draws them uniformly, as Linear). */
function numericRange(r) {
  return {min: Number(r.MinValue), max: Number(r.MaxValue), log: r.ScalingType === "Logarithmic"};
}

/** "4 training jobs, 2 at a time, for at most 1h00m". */
function limitsText(limits) {
  const parts = [];
  if (limits.MaxNumberOfTrainingJobs) parts.push(plural(limits.MaxNumberOfTrainingJobs, "training job"));
  if (limits.MaxParallelTrainingJobs) parts.push(`${limits.MaxParallelTrainingJobs} at a time`);
  if (limits.MaxRuntimeInSeconds) parts.push(`for at most ${fmtDuration(limits.MaxRuntimeInSeconds)}`);
  return parts.join(", ") || "–";
}

/** The completion criteria as a sentence. */
function criteriaText(criteria) {
  const parts = [];
  if (criteria.TargetObjectiveMetricValue !== undefined) parts.push(`target ${fmtNum(criteria.TargetObjectiveMetricValue)}`);
  const limit = criteria.BestObjectiveNotImproving?.MaxNumberOfTrainingJobsNotImproving;
  if (limit !== undefined) parts.push(`${plural(limit, "training job")} without improving`);
  if (criteria.ConvergenceDetected?.CompleteOnConvergence === "Enabled") parts.push("on convergence");
  return parts.join(", ") || "–";
}
