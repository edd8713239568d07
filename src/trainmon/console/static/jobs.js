// The jobs page: every job with its status and final metrics, live, to filter, sort and compare.

import {get, liveStream} from "./api.js";
import {h, clear, fmtNum, fmtTime, fmtDuration, statusBadge, debounce, TERMINAL} from "./dom.js";
import {navigate} from "./router.js";

const STATUSES = ["InProgress", "Completed", "Failed", "Stopping", "Stopped"];

export function mount(root) {
  document.title = "Jobs · trainmon";
  const state = {
    jobs: new Map(),
    token: null,
    sort: {key: "start", descending: true},
    selected: new Set(),
    filter: {name: "", status: ""},
  };
  const name = h("input", {type: "search", name: "filter-name", placeholder: "Filter by name"});
  const status = h(
    "select",
    {name: "filter-status"},
    h("option", {value: ""}, "Any status"),
    STATUSES.map((s) => h("option", {value: s}, s)),
  );
  const compare = h(
    "button",
    {
      type: "button",
      name: "compare",
      disabled: true,
      onclick: () => navigate(`/compare?jobs=${[...state.selected].map(encodeURIComponent).join(",")}`),
    },
    "Compare",
  );
  const more = h("button", {type: "button", name: "more", hidden: true, onclick: () => load(true)}, "More jobs");
  const error = h("p", {class: "error", hidden: true});
  const tableEl = h("table", {class: "jobs"});
  clear(
    root,
    h(
      "div",
      {class: "page-head"},
      h("h1", {}, "Training jobs"),
      h("div", {class: "actions"}, compare, h("a", {class: "button primary", href: "/new"}, "New job")),
    ),
    h("div", {class: "toolbar"}, name, status),
    error,
    h("div", {class: "table-wrap"}, tableEl),
    more,
  );

  const matches = (job) =>
    (!state.filter.name || job.TrainingJobName.includes(state.filter.name)) &&
    (!state.filter.status || job.TrainingJobStatus === state.filter.status);

  async function load(next = false) {
    try {
      const answer = await get("/api/jobs", {
        name: state.filter.name,
        status: state.filter.status,
        limit: 100,
        token: next ? state.token : undefined,
      });
      if (!next) state.jobs.clear();
      for (const job of answer.TrainingJobSummaries) state.jobs.set(job.TrainingJobName, job);
      state.token = answer.NextToken || null;
      more.hidden = !state.token;
      error.hidden = true;
      render();
    } catch (exc) {
      error.hidden = false;
      error.textContent = exc.message;
    }
  }

  const refilter = debounce(() => {
    state.filter = {name: name.value.trim(), status: status.value};
    load();
  }, 250);
  name.addEventListener("input", refilter);
  status.addEventListener("change", refilter);

  const duration = (job) => {
    const start = job.TrainingStartTime;
    if (!start) return null;
    const end = job.TrainingEndTime || (TERMINAL.has(job.TrainingJobStatus) ? job.LastModifiedTime : Date.now() / 1000);
    return end - start;
  };

  const columns = () => {
    const metrics = new Set();
    for (const job of state.jobs.values()) for (const m of Object.keys(job.FinalMetrics || {})) metrics.add(m);
    return [
      {key: "name", label: "Name", value: (j) => j.TrainingJobName},
      {key: "status", label: "Status", value: (j) => j.TrainingJobStatus},
      {key: "secondary", label: "Secondary status", value: (j) => j.SecondaryStatus},
      {key: "start", label: "Started", value: (j) => j.TrainingStartTime || j.CreationTime},
      {key: "duration", label: "Duration", value: duration},
      ...[...metrics]
        .sort()
        .map((m) => ({key: "metric:" + m, label: m, metric: m, value: (j) => (j.FinalMetrics || {})[m]})),
    ];
  };

  function sortValue(value) {
    if (typeof value === "string" && ["NaN", "Infinity", "-Infinity"].includes(value)) return Number(value);
    return value;
  }

  let shown = {columns: "", rows: ""}; // what the table holds, to update it in place when it can

  function cells(job, cols) {
    return [
      h(
        "td",
        {class: "check"},
        h("input", {
          type: "checkbox",
          name: "select",
          value: job.TrainingJobName,
          checked: state.selected.has(job.TrainingJobName),
          "aria-label": `select ${job.TrainingJobName}`,
          onchange: (e) => {
            if (e.target.checked) state.selected.add(job.TrainingJobName);
            else state.selected.delete(job.TrainingJobName);
            updateCompare();
          },
        }),
      ),
      h("td", {}, h("a", {href: `/jobs/${encodeURIComponent(job.TrainingJobName)}`}, job.TrainingJobName)),
      h("td", {"data-col": "status"}, statusBadge(job.TrainingJobStatus)),
      h("td", {"data-col": "secondary"}, job.SecondaryStatus),
      h("td", {"data-col": "start"}, fmtTime(job.TrainingStartTime || job.CreationTime)),
      h("td", {"data-col": "duration"}, fmtDuration(duration(job))),
      cols.filter((c) => c.metric).map((c) => h("td", {class: "num", "data-metric": c.metric}, fmtNum(c.value(job)))),
    ];
  }

  function updateCompare() {
    compare.disabled = state.selected.size < 2;
    compare.textContent = state.selected.size ? `Compare (${state.selected.size})` : "Compare";
  }

  function render() {
    const cols = columns();
    const col = cols.find((c) => c.key === state.sort.key) || cols[3];
    const rows = [...state.jobs.values()].filter(matches).sort((a, b) => {
      const x = sortValue(col.value(a)),
        y = sortValue(col.value(b));
      if (x === y) return 0;
      if (x === undefined || x === null || Number.isNaN(x)) return 1; // missing values last, either way
      if (y === undefined || y === null || Number.isNaN(y)) return -1;
      const order = typeof x === "string" ? x.localeCompare(y) : x - y;
      return state.sort.descending ? -order : order;
    });
    for (const selected of state.selected) if (!state.jobs.has(selected)) state.selected.delete(selected);
    updateCompare();
    const columnsKey = JSON.stringify([cols.map((c) => c.key), state.sort]);
    const rowsKey = JSON.stringify(rows.map((j) => j.TrainingJobName));
    if (rows.length && columnsKey === shown.columns && rowsKey === shown.rows) {
      // the same rows in the same order: new values in place (a checkbox being clicked stays put)
      for (const job of rows) {
        const tr = tableEl.querySelector(`tr[data-job="${CSS.escape(job.TrainingJobName)}"]`);
        const fresh = cells(job, cols).flat();
        [...tr.children].slice(2).forEach((td, i) => {
          const now = fresh[i + 2];
          if (td.textContent !== now.textContent) td.replaceWith(now);
        });
      }
      return;
    }
    shown = {columns: columnsKey, rows: rowsKey};
    clear(
      tableEl,
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", {class: "check"}),
          cols.map((c) =>
            h(
              "th",
              {
                "data-sort": c.key,
                class: c.metric ? "num sortable" : "sortable",
                "aria-sort": c.key === col.key ? (state.sort.descending ? "descending" : "ascending") : "none",
                onclick: () => {
                  state.sort = {
                    key: c.key,
                    descending: c.key === state.sort.key ? !state.sort.descending : c.key === "start",
                  };
                  render();
                },
              },
              c.label,
              c.key === col.key ? (state.sort.descending ? " ▾" : " ▴") : "",
            ),
          ),
        ),
      ),
      h(
        "tbody",
        {},
        rows.length
          ? rows.map((job) => h("tr", {"data-job": job.TrainingJobName}, cells(job, cols).flat()))
          : h(
              "tr",
              {},
              h(
                "td",
                {colspan: cols.length + 1, class: "muted empty"},
                state.jobs.size ? "No job matches." : "No jobs yet. Start one with New job.",
              ),
            ),
      ),
    );
  }

  const renderSoon = debounce(render, 100);

  // live: a job's summary when its status or final metrics change (without its start time and
  // hyperparameters, which we keep from the list)
  const lookedUp = new Set();
  const stream = liveStream(
    () => "/api/events",
    {
      job: (summary) => {
        const known = state.jobs.get(summary.TrainingJobName);
        if (!known && !matches(summary)) return;
        const job = {...(known || {}), ...summary};
        state.jobs.set(job.TrainingJobName, job);
        if (!job.TrainingStartTime && job.SecondaryStatus !== "Starting" && !lookedUp.has(job.TrainingJobName)) {
          lookedUp.add(job.TrainingJobName);
          get("/api/jobs", {name: job.TrainingJobName, limit: 100})
            .then((answer) => {
              const full = answer.TrainingJobSummaries.find((j) => j.TrainingJobName === job.TrainingJobName);
              if (full && state.jobs.has(full.TrainingJobName)) {
                state.jobs.set(full.TrainingJobName, {
                  ...full,
                  ...state.jobs.get(full.TrainingJobName),
                  TrainingStartTime: full.TrainingStartTime,
                  HyperParameters: full.HyperParameters,
                });
                renderSoon();
              }
            })
            .catch(() => {});
        }
        renderSoon();
      },
      deleted: ({TrainingJobName}) => {
        state.jobs.delete(TrainingJobName);
        renderSoon();
      },
    },
    {closeOn: []},
  );
  const tick = setInterval(() => {
    for (const row of tableEl.querySelectorAll("tr[data-job]")) {
      const job = state.jobs.get(row.dataset.job);
      if (job && !TERMINAL.has(job.TrainingJobStatus))
        row.querySelector("[data-col=duration]").textContent = fmtDuration(duration(job));
    }
  }, 1000);
  load();
  return () => {
    stream.close();
    clearInterval(tick);
    refilter.cancel();
  };
}
