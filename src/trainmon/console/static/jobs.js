// The jobs page: every job with its status, final metrics, hyperparameters and tags, live, to
// search (SageMaker's Search in its text form, kept in the URL), sort, choose columns and compare.

import {get, post, liveStream} from "./api.js";
import {h, clear, fmtNum, fmtTime, fmtDuration, statusBadge, debounce, breakable, TERMINAL, tuningJobOf} from "./dom.js";
import {navigate} from "./router.js";

const STATUSES = ["InProgress", "Completed", "Failed", "Stopping", "Stopped"];
const CHOSEN = "trainmon.jobs.columns"; // the columns chosen, remembered by this browser
const DEFAULT_METRICS = 6; // at most this many metrics shown until columns are chosen

// A property's name as Search reads it, for a column's key.
const PROPERTY = {metric: "Metrics.", hyper: "HyperParameters.", tag: "Tags."};

// the columns ticked and unticked in the chooser: shown are those that differ, with the ticked, without the unticked
function chosenColumns() {
  try {
    const saved = JSON.parse(localStorage.getItem(CHOSEN) || "{}");
    return {on: new Set(saved.on || []), off: new Set(saved.off || [])};
  } catch {
    return {on: new Set(), off: new Set()};
  }
}

export function mount(root) {
  document.title = "Jobs · trainmon";
  const query = new URLSearchParams(location.search);
  const state = {
    jobs: new Map(),
    token: null,
    total: null,
    sort: {key: query.get("sort") || "start", descending: query.get("order") !== "ascending"},
    selected: new Set(),
    filter: {name: "", status: "", where: query.get("where") || ""},
    group: "",
    chosen: chosenColumns(),
  };
  const name = h("input", {type: "search", name: "filter-name", placeholder: "Filter by name"});
  const where = h("input", {
    type: "search",
    name: "where",
    class: "where",
    value: state.filter.where,
    placeholder: "Search: HyperParameters.lr < 0.01 and Metrics.validation:error < 0.2",
    spellcheck: "false",
    title:
      "SageMaker's Search: = != < <= > >= contains in exists, and/or, parentheses; names such as " +
      "HyperParameters.lr, Metrics.loss, Tags.team, TrainingJobStatus. Click a hyperparameter or tag to add it.",
  });
  const count = h("span", {class: "muted count"});
  const group = h("select", {name: "group-by", title: "Group the jobs by a hyperparameter or tag, each group's best first"},
    h("option", {value: ""}, "No grouping"));
  group.addEventListener("change", () => {
    state.group = group.value;
    shown = {columns: "", rows: ""};
    render();
  });
  const chooser = h("details", {class: "columns"}, h("summary", {}, "Columns"));
  const closeChooser = (e) => {
    if (chooser.open && !chooser.contains(e.target)) chooser.open = false; // a click elsewhere closes it
  };
  document.addEventListener("click", closeChooser);
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
    h("div", {class: "toolbar"}, where, name, status, chooser, group, count),
    error,
    h("div", {class: "table-wrap"}, tableEl),
    more,
  );

  const matches = (job) =>
    (!state.filter.name || job.TrainingJobName.includes(state.filter.name)) &&
    (!state.filter.status || job.TrainingJobStatus === state.filter.status);

  // the server's order for the page's sort: a property's for a metric, hyperparameter or tag column
  function serverSort() {
    const [kind, ...rest] = state.sort.key.split(":");
    if (PROPERTY[kind]) return PROPERTY[kind] + rest.join(":");
    return {name: "Name", status: "Status"}[state.sort.key] || "CreationTime";
  }

  function remember() {
    const params = new URLSearchParams();
    if (state.filter.where) params.set("where", state.filter.where);
    if (state.sort.key !== "start") params.set("sort", state.sort.key);
    if (!state.sort.descending) params.set("order", "ascending");
    const search = params.toString();
    history.replaceState(history.state, "", location.pathname + (search ? `?${search}` : ""));
  }

  let asked = 0; // the latest load: an earlier answer that comes late is not shown
  let loading = false;
  async function load(next = false) {
    const mine = ++asked;
    loading = true;
    try {
      const answer = await get("/api/jobs", {
        name: state.filter.name,
        status: state.filter.status,
        where: state.filter.where,
        sort: serverSort(),
        order: state.sort.descending ? "Descending" : "Ascending",
        limit: 100,
        token: next ? state.token : undefined,
      });
      if (mine !== asked) return;
      if (!next) state.jobs.clear();
      for (const job of answer.TrainingJobSummaries) state.jobs.set(job.TrainingJobName, job);
      state.token = answer.NextToken || null;
      state.total = answer.TotalHits || null;
      more.hidden = !state.token;
      error.hidden = true;
      where.classList.remove("invalid");
      render();
    } catch (exc) {
      if (mine !== asked) return;
      error.hidden = false;
      error.textContent = exc.message;
      if (state.filter.where) where.classList.add("invalid");
    } finally {
      if (mine === asked) loading = false;
    }
  }

  const refilter = debounce(() => {
    state.filter = {name: name.value.trim(), status: status.value, where: where.value.trim()};
    remember();
    load();
  }, 250);
  name.addEventListener("input", refilter);
  status.addEventListener("change", refilter);
  where.addEventListener("input", refilter);

  // a tag edited in its cell: AddTags with the new value, DeleteTags when emptied
  function editTag(td, job, key) {
    const before = (job.Tags || {})[key] ?? "";
    const input = h("input", {type: "text", name: "tag-value", value: before, class: "tag-input", spellcheck: "false"});
    const done = async (save) => {
      const value = input.value.trim();
      if (save && value !== before) {
        try {
          if (value) await post("/api/sagemaker/AddTags", {ResourceArn: job.TrainingJobArn, Tags: [{Key: key, Value: value}]});
          else await post("/api/sagemaker/DeleteTags", {ResourceArn: job.TrainingJobArn, TagKeys: [key]});
          const tags = {...(job.Tags || {})};
          if (value) tags[key] = value;
          else delete tags[key];
          job.Tags = tags;
          error.hidden = true;
        } catch (exc) {
          error.hidden = false;
          error.textContent = exc.message;
        }
      }
      shown = {columns: "", rows: ""};
      render();
    };
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") done(true);
      if (e.key === "Escape") done(false);
    });
    input.addEventListener("blur", () => done(true), {once: true});
    td.replaceChildren(input);
    input.focus();
    input.select();
  }

  // a clicked hyperparameter or tag narrows the search to its value
  function narrow(property, value) {
    const quoted = /^[^\s()"=!<>]+$/.test(value) ? value : `"${value.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`;
    const clause = `${property} = ${quoted}`;
    where.value = where.value.trim() ? `${where.value.trim()} and ${clause}` : clause;
    refilter();
  }

  const duration = (job) => {
    const start = job.TrainingStartTime;
    if (!start) return null;
    const end = job.TrainingEndTime || (TERMINAL.has(job.TrainingJobStatus) ? job.LastModifiedTime : Date.now() / 1000);
    return end - start;
  };

  // every column the loaded jobs could show: metrics, hyperparameters and tags, each with how
  // many jobs have it and whether its values differ
  function available() {
    const found = new Map();
    const see = (key, kind, name, value) => {
      const seen = found.get(key) || {key, kind, name, jobs: 0, values: new Set()};
      seen.jobs += 1;
      seen.values.add(String(value));
      found.set(key, seen);
    };
    for (const job of state.jobs.values()) {
      for (const [m, v] of Object.entries(job.FinalMetrics || {})) see("metric:" + m, "metric", m, v);
      for (const [m, [low, high]] of Object.entries(job.MetricRanges || {})) {
        see("min:" + m, "min", m, low);
        see("max:" + m, "max", m, high);
      }
      for (const [k, v] of Object.entries(job.HyperParameters || {})) see("hyper:" + k, "hyper", k, v);
      for (const [k, v] of Object.entries(job.Tags || {})) see("tag:" + k, "tag", k, v);
    }
    const differs = (c) => c.values.size > 1 || c.jobs < state.jobs.size;
    const byUse = (a, b) => b.jobs - a.jobs || a.name.localeCompare(b.name);
    const all = [...found.values()].sort(byUse);
    const metrics = all.filter((c) => c.kind === "metric");
    const shown = new Set([
      ...metrics.slice(0, DEFAULT_METRICS).map((c) => c.key),
      ...all.filter((c) => (c.kind === "hyper" || c.kind === "tag") && differs(c)).map((c) => c.key),
      ...state.chosen.on,
    ]);
    for (const key of state.chosen.off) shown.delete(key);
    return {all, shown};
  }

  const columns = () => {
    const {all, shown} = available();
    const chosen = all.filter((c) => shown.has(c.key));
    const order = {metric: 0, min: 0, max: 0, hyper: 1, tag: 2};
    const within = {metric: 0, min: 1, max: 2};
    chosen.sort((a, b) => order[a.kind] - order[b.kind] || a.name.localeCompare(b.name) ||
      (within[a.kind] ?? 0) - (within[b.kind] ?? 0));
    return [
      {key: "name", label: "Name", value: (j) => j.TrainingJobName},
      {key: "status", label: "Status", value: (j) => j.TrainingJobStatus},
      {key: "secondary", label: "Secondary status", value: (j) => j.SecondaryStatus},
      {key: "start", label: "Started", value: (j) => j.TrainingStartTime || j.CreationTime},
      {key: "duration", label: "Duration", value: duration},
      ...chosen.map((c) => ({
        key: c.key,
        kind: c.kind,
        name: c.name,
        label: c.kind === "min" || c.kind === "max" ? `${c.name} (${c.kind})` : c.name,
        value: (j) =>
          c.kind === "metric"
            ? (j.FinalMetrics || {})[c.name]
            : c.kind === "min" || c.kind === "max"
              ? (j.MetricRanges || {})[c.name]?.[c.kind === "min" ? 0 : 1]
              : (c.kind === "hyper" ? j.HyperParameters || {} : j.Tags || {})[c.name],
      })),
    ];
  };

  // the chooser: a checkbox per column the jobs have, grouped; what is chosen is remembered
  function renderChooser() {
    const {all, shown} = available();
    const group = (kind, title) => {
      const kinds = kind === "metric" ? ["metric", "min", "max"] : [kind];
      const items = all.filter((c) => kinds.includes(c.kind));
      if (!items.length) return null;
      return h(
        "fieldset",
        {"data-kind": kind},
        h("legend", {}, title),
        items.map((c) =>
          h(
            "label",
            {},
            h("input", {
              type: "checkbox",
              name: "column",
              value: c.key,
              checked: shown.has(c.key),
              onchange: (e) => {
                const {on, off} = state.chosen;
                (e.target.checked ? on : off).add(c.key);
                (e.target.checked ? off : on).delete(c.key);
                localStorage.setItem(CHOSEN, JSON.stringify({on: [...on], off: [...off]}));
                render();
              },
            }),
            ` ${c.name}${c.kind === "min" || c.kind === "max" ? ` (${c.kind})` : c.kind === "metric" ? " (final)" : ""} `,
            h("span", {class: "muted"}, `(${c.jobs})`),
          ),
        ),
      );
    };
    const open = chooser.open;
    clear(
      chooser,
      h("summary", {}, "Columns"),
      h(
        "div",
        {class: "chooser"},
        group("metric", "Metrics: final, least, greatest"),
        group("hyper", "Hyperparameters"),
        group("tag", "Tags"),
        h(
          "button",
          {
            type: "button",
            name: "columns-default",
            onclick: () => {
              state.chosen = {on: new Set(), off: new Set()};
              localStorage.removeItem(CHOSEN);
              render();
            },
          },
          "The columns that differ",
        ),
      ),
    );
    chooser.open = open;
  }

  // a value as it sorts: numbers written as text (hyperparameters, tags) as numbers, as Search sorts them
  function sortValue(value) {
    if (typeof value === "string" && ["NaN", "Infinity", "-Infinity"].includes(value)) return Number(value);
    if (typeof value === "string" && value.trim() !== "" && Number.isFinite(Number(value))) return Number(value);
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
      h(
        "td",
        {},
        h("a", {href: `/jobs/${encodeURIComponent(job.TrainingJobName)}`}, job.TrainingJobName),
        tuningOf(job),
      ),
      h("td", {"data-col": "status"}, statusBadge(job.TrainingJobStatus)),
      h("td", {"data-col": "secondary"}, job.SecondaryStatus),
      h("td", {"data-col": "start"}, fmtTime(job.TrainingStartTime || job.CreationTime)),
      h("td", {"data-col": "duration"}, fmtDuration(duration(job))),
      cols
        .filter((c) => c.kind)
        .map((c) => {
          const value = c.value(job);
          if (c.kind === "metric") return h("td", {class: "num", "data-metric": c.name}, fmtNum(value));
          if (c.kind === "min" || c.kind === "max")
            return h("td", {class: "num", [`data-${c.kind}`]: c.name}, fmtNum(value));
          const property = PROPERTY[c.kind] + c.name;
          const edit =
            c.kind === "tag"
              ? h("button", {type: "button", class: "link edit-tag", title: `edit the tag ${c.name}`, name: "edit-tag",
                  onclick: (e) => editTag(e.target.closest("td"), job, c.name)}, "✎")
              : null;
          return h(
            "td",
            {"data-property": property},
            edit,
            value === undefined
              ? "–"
              : h(
                  "button",
                  {type: "button", class: "link", name: "narrow", title: `only ${property} = ${value}`,
                    onclick: () => narrow(property, value)},
                  value,
                ),
          );
        }),
    ];
  }

  function updateCompare() {
    compare.disabled = state.selected.size < 2;
    compare.textContent = state.selected.size ? `Compare (${state.selected.size})` : "Compare";
  }

  // rows in groups of one hyperparameter's or tag's value, each group's best (first in the sort) first,
  // the groups in the order of their best; a header row before each
  function grouped(rows, cols, col) {
    if (!state.group) return rows;
    const [kind, ...rest] = state.group.split(":");
    const key = rest.join(":");
    const valueOf = (j) => ((kind === "hyper" ? j.HyperParameters : j.Tags) || {})[key] ?? "(none)";
    const groups = new Map();
    for (const job of rows) {
      const value = valueOf(job);
      if (!groups.has(value)) groups.set(value, []);
      groups.get(value).push(job);
    }
    const out = [];
    for (const [value, members] of groups) {
      const best = members[0];
      const shownBest = col.kind ? ` · best ${col.label} ${fmtNum(col.value(best))} (${best.TrainingJobName})` : "";
      out.push({group: value, text: `${PROPERTY[kind]}${key} = ${value} · ${members.length} job${members.length === 1 ? "" : "s"}${shownBest}`});
      out.push(...members);
    }
    return out;
  }

  function renderGroups() {
    const {all} = available();
    const keys = all.filter((c) => c.kind === "hyper" || c.kind === "tag").map((c) => c.key);
    const now = [...group.options].slice(1).map((o) => o.value);
    if (JSON.stringify(now) === JSON.stringify(keys)) return;
    const label = (k) => `Group by ${PROPERTY[k.split(":")[0]]}${k.split(":").slice(1).join(":")}`;
    clear(
      group,
      h("option", {value: ""}, "No grouping"),
      keys.map((k) => h("option", {value: k, selected: k === state.group}, label(k))),
    );
  }

  function render() {
    renderChooser();
    renderGroups();
    const loaded = state.jobs.size;
    count.textContent = state.total
      ? `${loaded} of ${state.total.Relation === "EqualTo" ? "" : "at least "}${state.total.Value} matching jobs`
      : "";
    const cols = columns();
    const col = cols.find((c) => c.key === state.sort.key) || cols[3];
    const rows = [...state.jobs.values()].filter(matches).sort((a, b) => {
      const x = sortValue(col.value(a)),
        y = sortValue(col.value(b));
      if (x === y) return 0;
      if (x === undefined || x === null || Number.isNaN(x)) return 1; // missing values last, either way
      if (y === undefined || y === null || Number.isNaN(y)) return -1;
      if (typeof x !== typeof y) return typeof x === "number" ? -1 : 1; // numbers before text, either way
      const order = typeof x === "string" ? x.localeCompare(y) : x - y;
      return state.sort.descending ? -order : order;
    });
    for (const selected of state.selected) if (!state.jobs.has(selected)) state.selected.delete(selected);
    updateCompare();
    const columnsKey = JSON.stringify([cols.map((c) => c.key), state.sort, state.group]);
    const names = rows.map((j) => j.TrainingJobName);
    const rowsKey = JSON.stringify(names);
    const same = columnsKey === shown.columns;
    if (rows.length && same && rowsKey === shown.rows) {
      // the same rows in the same order: new values in place (a checkbox being clicked stays put)
      const trs = new Map([...tableEl.querySelectorAll("tr[data-job]")].map((tr) => [tr.dataset.job, tr]));
      for (const job of rows) {
        const tr = trs.get(job.TrainingJobName);
        const fresh = cells(job, cols).flat();
        [...tr.children].slice(2).forEach((td, i) => {
          const now = fresh[i + 2];
          if (td.textContent !== now.textContent) td.replaceWith(now);
        });
      }
      return;
    }
    const before = shown.names || [];
    if (same && !state.group && before.length && names.length > before.length &&
        before.every((name, i) => names[i] === name)) {
      // the next page came: its rows after the others, nothing drawn again
      tableEl.querySelector("tbody").append(
        ...rows.slice(before.length).map((job) => h("tr", {"data-job": job.TrainingJobName}, cells(job, cols).flat())),
      );
      shown = {columns: columnsKey, rows: rowsKey, names};
      return;
    }
    shown = {columns: columnsKey, rows: rowsKey, names};
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
                class: ["metric", "min", "max"].includes(c.kind) ? "num sortable" : "sortable",
                "aria-sort": c.key === col.key ? (state.sort.descending ? "descending" : "ascending") : "none",
                onclick: () => {
                  state.sort = {
                    key: c.key,
                    descending: c.key === state.sort.key ? !state.sort.descending : c.key === "start",
                  };
                  remember();
                  if (state.token || c.kind) load(); // the server's order over every job, not only those loaded
                  else render();
                },
              },
              breakable(c.label),
              c.key === col.key ? (state.sort.descending ? "\u00a0▾" : "\u00a0▴") : "",
            ),
          ),
        ),
      ),
      h(
        "tbody",
        {},
        rows.length
          ? grouped(rows, cols, col).map((item) =>
              item.group
                ? h("tr", {class: "group", "data-group": item.group}, h("td", {colspan: cols.length + 1}, item.text))
                : h("tr", {"data-job": item.TrainingJobName}, cells(item, cols).flat()),
            )
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
        if (!known && (state.filter.where || !matches(summary))) return; // (a search's new matches: on reload)
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
  // the next page comes when the end of the table is near: thousands of jobs scroll as one list
  const nearEnd = new IntersectionObserver((entries) => {
    if (entries.some((e) => e.isIntersecting) && state.token && !loading) load(true);
  }, {rootMargin: "600px"});
  nearEnd.observe(more);
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
    document.removeEventListener("click", closeChooser);
    nearEnd.disconnect();
    refilter.cancel();
  };
}

/** A trial's tuning job, as a link under its name (nothing for a job of no tuning job). */
function tuningOf(job) {
  const tuning = tuningJobOf(job);
  if (!tuning) return null;
  return h("div", {class: "tuning-of"}, "trial of ", h("a", {href: `/tuning/${encodeURIComponent(tuning)}`}, tuning));
}
