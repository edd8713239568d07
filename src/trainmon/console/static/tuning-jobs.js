// The tuning jobs page: every hyperparameter tuning job, newest first, with its status, strategy,
// objective, its training jobs' and objectives' counters and its best objective, refreshed while any
// is InProgress or Stopping. Also what a tuning job's page shares: the operations' calls, the
// objective and the counters as text and as a bar.

import {post} from "./api.js";
import {h, clear, fmtNum, fmtTime, fmtDuration, statusBadge, breakable, debounce} from "./dom.js";

export const ACTIVE = new Set(["InProgress", "Stopping"]);
export const POLL_MS = 3000; // how often an active tuning job is asked again
const STATUSES = ["InProgress", "Completed", "Failed", "Stopping", "Stopped"];
const PAGE = 50;

/** A SageMaker operation through the server's generic route. */
export const sagemaker = (operation, body) => post(`/api/sagemaker/${operation}`, body);

/** The tuning job's objective as people say it: "Minimize validation:loss". */
export function objectiveText(described) {
  const goal = described?.HyperParameterTuningJobConfig?.HyperParameterTuningJobObjective ||
    (described?.TrainingJobDefinitions || [])[0]?.TuningObjective;
  return goal ? `${goal.Type} ${goal.MetricName}` : "–";
}

// the training jobs' counters in the order a tuning job goes through them, each with its colour
export const COUNTERS = [
  ["Completed", "completed"],
  ["InProgress", "in progress"],
  ["Stopped", "stopped"],
  ["NonRetryableError", "failed"],
  ["RetryableError", "failed (retryable)"],
];

/** "3 of 4: 2 completed, 1 in progress": the training jobs started, of the most there can be. */
export function countersText(counters = {}, limits = {}) {
  const started = COUNTERS.reduce((n, [key]) => n + (counters[key] || 0), 0);
  const parts = COUNTERS.filter(([key]) => counters[key]).map(([key, text]) => `${counters[key]} ${text}`);
  const most = limits.MaxNumberOfTrainingJobs;
  return `${started}${most ? ` of ${most}` : ""}${parts.length ? `: ${parts.join(", ")}` : ""}`;
}

/** "4 succeeded, 1 pending": the objectives' counters that are not zero. */
export function objectivesText(counters = {}) {
  const parts = ["Succeeded", "Pending", "Failed"].filter((k) => counters[k]).map((k) => `${counters[k]} ${k.toLowerCase()}`);
  return parts.join(", ") || "none yet";
}

/** The training jobs' counters as a bar: a segment per status, and what is left to start. */
export function countersBar(counters = {}, limits = {}) {
  const started = COUNTERS.reduce((n, [key]) => n + (counters[key] || 0), 0);
  const left = Math.max(0, (limits.MaxNumberOfTrainingJobs || started) - started);
  const segments = [...COUNTERS.map(([key, text]) => [key, text, counters[key] || 0]), ["Left", "not started", left]];
  return h(
    "div",
    {class: "counter-bar", title: countersText(counters, limits)},
    segments
      .filter(([, , n]) => n > 0)
      .map(([key, text, n]) => h("span", {class: "seg", "data-counter": key, style: `flex-grow:${n}`, title: `${n} ${text}`})),
  );
}

export function mount(root) {
  document.title = "Tuning jobs · trainmon";
  const state = {jobs: new Map(), described: new Map(), pages: 1, token: null, filter: {name: "", status: ""}};
  const name = h("input", {type: "search", name: "filter-name", placeholder: "Filter by name"});
  const status = h(
    "select",
    {name: "filter-status"},
    h("option", {value: ""}, "Any status"),
    STATUSES.map((s) => h("option", {value: s}, s)),
  );
  const count = h("span", {class: "muted count"});
  const error = h("p", {class: "error", hidden: true});
  const tableEl = h("table", {class: "jobs tuning-jobs"});
  const more = h("button", {type: "button", name: "more", hidden: true, onclick: () => load(state.pages + 1)}, "More");
  clear(
    root,
    h("div", {class: "page-head"}, h("h1", {}, "Hyperparameter tuning jobs")),
    h("div", {class: "toolbar"}, name, status, count),
    error,
    h("div", {class: "table-wrap"}, tableEl),
    more,
  );

  let asked = 0;
  let timer = null;
  // ``pages`` pages of the newest (the refresh asks again for as many as are shown)
  async function load(pages = state.pages) {
    const mine = ++asked;
    try {
      const found = [];
      let token = null;
      for (let page = 0; page < pages; page++) {
        const answer = await sagemaker("ListHyperParameterTuningJobs", {
          SortBy: "CreationTime",
          SortOrder: "Descending",
          MaxResults: PAGE,
          NameContains: state.filter.name || undefined,
          StatusEquals: state.filter.status || undefined,
          NextToken: token || undefined,
        });
        found.push(...answer.HyperParameterTuningJobSummaries);
        token = answer.NextToken || null;
        if (!token) break;
      }
      await describe(found);
      if (mine !== asked) return;
      state.jobs = new Map(found.map((s) => [s.HyperParameterTuningJobName, s]));
      state.pages = pages;
      state.token = token;
      more.hidden = !token;
      error.hidden = true;
      render();
    } catch (exc) {
      if (mine !== asked) return;
      error.hidden = false;
      error.textContent = exc.message;
    }
    follow();
  }

  // each one's description, for its objective and best training job: asked again only when its
  // summary changed
  async function describe(summaries) {
    await Promise.all(
      summaries.map(async (summary) => {
        const key = JSON.stringify(summary);
        const known = state.described.get(summary.HyperParameterTuningJobName);
        if (known && known.key === key) return;
        try {
          const answer = await sagemaker("DescribeHyperParameterTuningJob", {
            HyperParameterTuningJobName: summary.HyperParameterTuningJobName,
          });
          state.described.set(summary.HyperParameterTuningJobName, {key, answer});
        } catch {
          // deleted meanwhile: the row shows what the summary says
        }
      }),
    );
  }

  // asked again while any shown is active
  function follow() {
    clearTimeout(timer);
    if ([...state.jobs.values()].some((s) => ACTIVE.has(s.HyperParameterTuningJobStatus)))
      timer = setTimeout(() => load(), POLL_MS);
  }

  const refilter = debounce(() => {
    state.filter = {name: name.value.trim(), status: status.value};
    load(1);
  }, 250);
  name.addEventListener("input", refilter);
  status.addEventListener("change", refilter);

  const COLUMNS = ["Name", "Status", "Strategy", "Objective", "Training jobs", "Objectives", "Best objective",
    "Created", "Duration"];

  function row(summary) {
    const described = state.described.get(summary.HyperParameterTuningJobName)?.answer;
    const best = described?.BestTrainingJob;
    const end = summary.HyperParameterTuningEndTime ??
      (ACTIVE.has(summary.HyperParameterTuningJobStatus) ? Date.now() / 1000 : summary.LastModifiedTime);
    const link = `/tuning/${encodeURIComponent(summary.HyperParameterTuningJobName)}`;
    return h(
      "tr",
      {"data-tuning-job": summary.HyperParameterTuningJobName},
      h("td", {}, h("a", {href: link}, summary.HyperParameterTuningJobName)),
      h("td", {"data-col": "status"}, statusBadge(summary.HyperParameterTuningJobStatus)),
      h("td", {"data-col": "strategy"}, summary.Strategy),
      h("td", {"data-col": "objective"}, objectiveText(described)),
      h(
        "td",
        {"data-col": "counters"},
        countersText(summary.TrainingJobStatusCounters, summary.ResourceLimits),
        countersBar(summary.TrainingJobStatusCounters, summary.ResourceLimits),
      ),
      h("td", {"data-col": "objectives"}, objectivesText(summary.ObjectiveStatusCounters)),
      h(
        "td",
        {class: "num", "data-col": "best"},
        best
          ? h(
              "a",
              {href: `/jobs/${encodeURIComponent(best.TrainingJobName)}`, title: best.TrainingJobName},
              fmtNum(best.FinalHyperParameterTuningJobObjectiveMetric?.Value),
            )
          : "–",
      ),
      h("td", {"data-col": "created"}, fmtTime(summary.CreationTime)),
      h("td", {"data-col": "duration"}, fmtDuration(end - summary.CreationTime)),
    );
  }

  function render() {
    const rows = [...state.jobs.values()];
    count.textContent = `${rows.length}${state.token ? "+" : ""} tuning job${rows.length === 1 ? "" : "s"}`;
    clear(
      tableEl,
      h("thead", {}, h("tr", {}, COLUMNS.map((c) => h("th", {class: c === "Best objective" ? "num" : ""},
        breakable(c))))),
      h(
        "tbody",
        {},
        rows.length
          ? rows.map(row)
          : h(
              "tr",
              {},
              h(
                "td",
                {colspan: COLUMNS.length, class: "muted empty"},
                state.filter.name || state.filter.status
                  ? "No tuning job matches."
                  : "No tuning jobs yet: CreateHyperParameterTuningJob starts one (boto3, the SageMaker SDK's " +
                      "HyperparameterTuner, or POST /api/sagemaker/CreateHyperParameterTuningJob).",
              ),
            ),
      ),
    );
  }

  load();
  return () => {
    asked++; // an answer still on its way is not shown
    clearTimeout(timer);
    refilter.cancel();
  };
}
