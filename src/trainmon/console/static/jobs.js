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
      if (state.token) {
        // the end looked at again once this page is drawn: still near it (reached while the page came,
        // which the observer told while this load was on, or a page too short to push it away), the
        // next page comes; an observer tells only of changes, so the table stayed short of the end
        nearEnd.unobserve(more);
        nearEnd.observe(more);
      }
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
    if (editing) editing.finish(true);
    const name = job.TrainingJobName;
    const before = (job.Tags || {})[key] ?? "";
    const input = h("input", {type: "text", name: "tag-value", value: before, class: "tag-input", spellcheck: "false"});
    let finished = false;
    const finish = async (save) => {
      if (finished) return;
      finished = true;
      if (editing?.input === input) editing = null;
      const value = input.value.trim();
      if (save && value !== before) {
        try {
          if (value) await post("/api/sagemaker/AddTags", {ResourceArn: job.TrainingJobArn, Tags: [{Key: key, Value: value}]});
          else await post("/api/sagemaker/DeleteTags", {ResourceArn: job.TrainingJobArn, TagKeys: [key]});
          const now = state.jobs.get(name); // (none: deleted, or out of the list, while the tag was written)
          if (now) {
            const tags = {...(now.Tags || {})};
            if (value) tags[key] = value;
            else delete tags[key];
            state.jobs.set(name, {...now, Tags: tags}); // (a new object: its drawn row shows it)
          }
          error.hidden = true;
        } catch (exc) {
          error.hidden = false;
          error.textContent = exc.message;
        }
      }
      const tr = trOf.get(name);
      if (tr) tr.item = null; // its cells drawn again, the tag's value in place of the box
      render();
    };
    editing = {name, input, finish};
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") finish(true);
      if (e.key === "Escape") finish(false);
    });
    input.addEventListener("blur", () => finish(true), {once: true});
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

  // The table draws only the rows near the view once it holds more than ALL_ROWS (the rows above
  // and below them are two spacer rows of their height, so the page scrolls as over every row):
  // what a frame costs the browser (style, layout, paint) grows with the rows in the table, so a
  // table of thousands scrolls as one of a few dozen. Up to ALL_ROWS every row is drawn (a table
  // that short scrolls at the browser's pace anyway, and the browser's find-in-page finds any
  // name); beyond, find-in-page finds the rows drawn, and "Filter by name" finds any. The rows
  // drawn reach at least NEAR px beyond the view on either side; once they do not, rows are
  // drawn to FAR px beyond it, at most STEP a frame on either side (the cost spread over frames)
  // but always those in view and NEAR / 2 px beyond it; the rows still in reach are kept as
  // they are. Each row's height is measured a frame after it is drawn (the spacers use the last
  // one of its kind until then). A collapsed row of each column's widest value over every row,
  // drawn or not, in the table's foot keeps the columns as wide as every row drawn would, so
  // scrolling never changes them.
  const ALL_ROWS = 250;
  const NEAR = 300;
  const FAR = 400;
  const STEP = 3;

  const thead = h("thead");
  const body = h("tbody");
  const sizer = h("tfoot", {class: "sizer", inert: true, "aria-hidden": "true"});
  const spacer = () => h("tr", {class: "spacer", "aria-hidden": "true"}, h("td"));
  const above = spacer();
  const below = spacer();
  tableEl.append(thead, body, sizer);

  let shown = ""; // the columns, sort and grouping the table is drawn for
  let list = []; // what the table holds, in order: jobs, and each group's header when grouped
  let cols = [];
  let drawn = {start: 0, end: 0}; // the items drawn, list[start..end)
  const trOf = new Map(); // an item's key -> its row, for those drawn
  const measured = new Map(); // an item's key -> its row's height, once drawn
  const estimate = {job: 34, trial: 50, group: 32}; // a row's height before it is drawn: the last drawn of its kind
  let offsets = new Float64Array(1); // offsets[i]: where list[i] starts in the table's body
  let offsetsStale = true;
  let sizerKey = "";
  let editing = null; // the tag being edited: {name, input, finish}
  let growing = false; // the rows drawn do not reach FAR yet: more in the next frame
  let pending = 0; // that frame's request
  let drewAt = null; // the frame the rows were last drawn in
  const unmeasured = new Set(); // rows drawn, not measured yet

  const keyOf = (item) => (item.group !== undefined ? `group\u0000${item.group}` : item.TrainingJobName);
  const kindOf = (item) => (item.group !== undefined ? "group" : tuningJobOf(item) ? "trial" : "job");
  const heightOf = (item) => measured.get(keyOf(item)) ?? estimate[kindOf(item)];

  function layOut() {
    if (!offsetsStale && offsets.length === list.length + 1) return;
    offsets = new Float64Array(list.length + 1);
    for (let i = 0; i < list.length; i++) offsets[i + 1] = offsets[i] + heightOf(list[i]);
    offsetsStale = false;
  }

  // the index of the item at y px into the body (the last one past the end)
  function indexAt(y) {
    let low = 0,
      high = list.length - 1;
    while (low < high) {
      const mid = (low + high + 1) >> 1;
      if (offsets[mid] <= y) low = mid;
      else high = mid - 1;
    }
    return Math.max(0, low);
  }

  function checkCell(job) {
    return h(
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
    );
  }

  function cell(job, c) {
    if (c.key === "name")
      return h("td", {}, h("a", {href: `/jobs/${encodeURIComponent(job.TrainingJobName)}`}, job.TrainingJobName), tuningOf(job));
    if (c.key === "status") return h("td", {"data-col": "status"}, statusBadge(job.TrainingJobStatus));
    if (c.key === "secondary") return h("td", {"data-col": "secondary"}, job.SecondaryStatus);
    if (c.key === "start") return h("td", {"data-col": "start"}, fmtTime(job.TrainingStartTime || job.CreationTime));
    if (c.key === "duration") return h("td", {"data-col": "duration"}, fmtDuration(duration(job)));
    const value = c.value(job);
    if (c.kind === "metric") return h("td", {class: "num", "data-metric": c.name}, fmtNum(value));
    if (c.kind === "min" || c.kind === "max") return h("td", {class: "num", [`data-${c.kind}`]: c.name}, fmtNum(value));
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
        : h("button", {type: "button", class: "link", name: "narrow", title: `only ${property} = ${value}`,
            onclick: () => narrow(property, value)}, value),
    );
  }

  function rowOf(item) {
    const tr = item.group !== undefined
      ? h("tr", {class: "group", "data-group": item.group}, h("td", {colspan: cols.length + 1}, item.text))
      : h("tr", {"data-job": item.TrainingJobName}, checkCell(item), cols.map((c) => cell(item, c)));
    tr.item = item;
    return tr;
  }

  // a drawn row whose job changed: new values in place (a checkbox being clicked, a tag being edited, stay put)
  function refresh(tr, item) {
    if (item.group !== undefined) {
      if (tr.firstChild.textContent !== item.text) tr.firstChild.textContent = item.text;
    } else {
      const tds = tr.children;
      cols.forEach((c, i) => {
        const td = tds[i + 1];
        if (editing && td.contains(editing.input)) return;
        const now = cell(item, c);
        if (td.textContent !== now.textContent) td.replaceWith(now);
      });
    }
    tr.item = item;
  }

  // the rows near the view drawn, those no longer near it taken out; `again`: the list changed
  function draw(again = false) {
    const remeasured = measure();
    drewAt = document.timeline.currentTime;
    layOut();
    const n = list.length;
    let start = 0,
      end = n;
    if (n > ALL_ROWS) {
      const top = -body.getBoundingClientRect().top;
      const bottom = top + innerHeight;
      const reached = (drawn.start === 0 || offsets[drawn.start] <= top - NEAR) &&
        (drawn.end >= n || offsets[drawn.end] >= bottom + NEAR);
      if (!again && !growing && !remeasured && drawn.end > drawn.start && reached) return;
      start = indexAt(top - FAR);
      end = Math.min(n, indexAt(bottom + FAR) + 1);
      growing = false;
      if (!again && drawn.end > drawn.start) {
        // at most STEP new rows above and below in a frame, the rest in the next ones; the rows in
        // view at once (after a jump, those only)
        const first = indexAt(top),
          last = Math.min(n, indexAt(bottom) + 1);
        const goal = {start, end};
        if (start >= drawn.end || end <= drawn.start) [start, end] = [first, last];
        else {
          const up = indexAt(top - NEAR / 2),
            down = Math.min(n, indexAt(bottom + NEAR / 2) + 1);
          if (start < drawn.start) start = Math.min(Math.max(start, drawn.start - STEP), up);
          if (end > drawn.end) end = Math.max(Math.min(end, drawn.end + STEP), down);
        }
        growing = start !== goal.start || end !== goal.end;
      }
    } else if (!again && !remeasured && drawn.start === 0 && drawn.end === n) return;
    else growing = false;
    const wanted = list.slice(start, end);
    const keys = new Set(wanted.map(keyOf));
    for (const [key, tr] of trOf) {
      if (keys.has(key)) continue;
      if (editing && tr.contains(editing.input)) {
        const left = editing;
        queueMicrotask(() => left.finish(true)); // a tag being edited, scrolled away: kept, as leaving it keeps it
      }
      tr.remove();
      trOf.delete(key);
    }
    const fresh = [];
    let cursor = above.parentNode ? above.nextSibling : body.firstChild;
    for (const item of wanted) {
      const key = keyOf(item);
      let tr = trOf.get(key);
      if (!tr) {
        tr = rowOf(item);
        trOf.set(key, tr);
        fresh.push(tr);
      } else if (tr.item !== item) {
        refresh(tr, item);
        fresh.push(tr); // (measured again)
      }
      if (tr === cursor) cursor = cursor.nextSibling;
      else body.insertBefore(tr, cursor);
    }
    drawn = {start, end};
    for (const tr of fresh) unmeasured.add(tr);
    if (growing || fresh.length) nextFrame(); // (more rows, or the new rows' heights)
    pad(above, offsets[start], body.firstChild);
    pad(below, offsets[n] - offsets[end], null);
    tableEl.setAttribute("aria-rowcount", String(n + 1));
    wanted.forEach((item, i) => {
      const tr = trOf.get(keyOf(item));
      if (tr.ariaRowIndex !== String(start + i + 2)) tr.ariaRowIndex = String(start + i + 2);
    });
  }

  // the heights of the rows drawn since the last look (measured a frame later, when the page's
  // layout is done anyway): whether any differs from what the spacers took it to be
  function measure() {
    let changed = false;
    for (const tr of unmeasured) {
      if (!tr.isConnected || !tr.item) continue;
      const key = keyOf(tr.item);
      const height = tr.getBoundingClientRect().height;
      const kind = kindOf(tr.item);
      if (heightOf(tr.item) !== height || estimate[kind] !== height) changed = true; // (rows not drawn take the estimate)
      measured.set(key, height);
      estimate[kind] = height;
    }
    unmeasured.clear();
    if (changed) offsetsStale = true;
    return changed;
  }

  // draw again in the next frame (not this one: a request made while a scroll event is handled
  // would run before this frame is drawn)
  function nextFrame() {
    if (pending) return;
    pending = requestAnimationFrame((now) => {
      pending = 0;
      if (now === drewAt) nextFrame();
      else draw();
    });
  }

  // a spacer of `height` px, in the body only when it has a height
  function pad(tr, height, before) {
    if (height > 0.5) {
      tr.style.height = `${height}px`;
      if (!tr.parentNode) body.insertBefore(tr, before);
    } else tr.remove();
  }

  // the text a cell's width follows, and the font it is drawn in: each column's widest, over every row
  const canvas = document.createElement("canvas").getContext("2d");
  const textWidths = new Map();
  const cellWidths = new WeakMap();
  function textWidth(text, font) {
    const key = `${font}\u0000${text}`;
    let width = textWidths.get(key);
    if (width === undefined) {
      if (textWidths.size > 100_000) textWidths.clear();
      canvas.font = font;
      width = canvas.measureText(text).width;
      textWidths.set(key, width);
    }
    return width;
  }
  let fonts = null; // a cell's, a trial's line's and a status badge's, as the canvas takes them
  function fontsOf() {
    if (fonts) return fonts;
    const probe = h("tr", {}, h("td", {}, "x", h("div", {class: "tuning-of"}, "x"), statusBadge("x")));
    sizer.append(probe);
    const font = (el) => {
      const style = getComputedStyle(el);
      return `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
    };
    fonts = {cell: font(probe.firstChild), small: font(probe.querySelector(".tuning-of")), status: font(probe.querySelector(".status"))};
    probe.remove();
    return fonts;
  }

  function widthOf(job, c, fonts) {
    let widths = cellWidths.get(job);
    if (!widths) cellWidths.set(job, (widths = new Map()));
    let width = widths.get(c.key);
    if (width === undefined) {
      if (c.key === "name") {
        const tuning = tuningJobOf(job);
        width = Math.max(textWidth(job.TrainingJobName, fonts.cell), tuning ? textWidth(`trial of ${tuning}`, fonts.small) : 0);
      } else if (c.key === "status") width = textWidth(job.TrainingJobStatus || "Unknown", fonts.status);
      else if (c.key === "secondary") width = textWidth(job.SecondaryStatus || "", fonts.cell);
      else if (c.key === "start") width = textWidth(fmtTime(job.TrainingStartTime || job.CreationTime), fonts.cell);
      else if (c.key === "duration") {
        width = textWidth(fmtDuration(duration(job)), fonts.cell);
        if (!TERMINAL.has(job.TrainingJobStatus)) return width; // (it grows while the job runs)
      }
      else if (c.kind === "metric" || c.kind === "min" || c.kind === "max") width = textWidth(fmtNum(c.value(job)), fonts.cell);
      else width = textWidth(String(c.value(job) ?? "–"), fonts.cell);
      widths.set(c.key, width);
    }
    return width;
  }

  // the foot's collapsed rows: for each column, the two jobs of its widest values (two, in case
  // the canvas's measure and the page's differ by a hair), their cells without links or names
  function size(jobs) {
    const fonts = fontsOf();
    const widest = cols.map((c) => {
      let first = null,
        second = null,
        a = -1,
        b = -1;
      for (const job of jobs) {
        const width = widthOf(job, c, fonts);
        if (width > a) {
          [second, b] = [first, a];
          [first, a] = [job, width];
        } else if (width > b) [second, b] = [job, width];
      }
      return [first, second].filter(Boolean);
    });
    const key = JSON.stringify([shown, widest.map((pair, i) => pair.map((job) => [job.TrainingJobName, widthOf(job, cols[i], fonts)]))]);
    if (key === sizerKey) return;
    sizerKey = key;
    const rows = [0, 1].filter((k) => widest.some((pair) => pair[k]));
    sizer.replaceChildren(
      ...rows.map((k) =>
        h("tr", {}, h("td", {class: "check"}, h("input", {type: "checkbox", tabindex: "-1"})),
          cols.map((c, i) => {
            const job = widest[i][k] || widest[i][0];
            return job ? unnamed(cell(job, c)) : h("td");
          })),
      ),
    );
  }

  // a cell for the foot: no links, names, values or data, nothing to find or click
  function unnamed(td) {
    for (const a of td.querySelectorAll("a")) a.replaceWith(h("span", {}, ...a.childNodes));
    for (const el of [td, ...td.querySelectorAll("*")])
      for (const attr of [...el.attributes])
        if (attr.name !== "class" && attr.name !== "type") el.removeAttribute(attr.name);
    for (const el of td.querySelectorAll("input, button")) el.tabIndex = -1;
    return td;
  }

  function updateCompare() {
    compare.disabled = state.selected.size < 2;
    compare.textContent = state.selected.size ? `Compare (${state.selected.size})` : "Compare";
  }

  // rows in groups of one hyperparameter's or tag's value, each group's best (first in the sort) first,
  // the groups in the order of their best; a header row before each
  function grouped(rows, col) {
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

  function header(col) {
    return h(
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
    );
  }

  function render() {
    renderChooser();
    renderGroups();
    const loaded = state.jobs.size;
    count.textContent = state.total
      ? `${loaded} of ${state.total.Relation === "EqualTo" ? "" : "at least "}${state.total.Value} matching jobs`
      : "";
    cols = columns();
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
    if (columnsKey !== shown) {
      // other columns, order or grouping: every row drawn anew
      shown = columnsKey;
      thead.replaceChildren(header(col));
      for (const s of [above, below]) s.firstChild.colSpan = cols.length + 1;
      trOf.clear();
      measured.clear();
      body.replaceChildren();
      drawn = {start: 0, end: 0};
    }
    list = grouped(rows, col);
    offsetsStale = true;
    tableEl.dataset.rows = String(rows.length); // the jobs the table holds, drawn or not
    if (!rows.length) {
      trOf.clear();
      drawn = {start: 0, end: 0};
      sizer.replaceChildren();
      sizerKey = "";
      body.replaceChildren(
        h("tr", {}, h("td", {colspan: cols.length + 1, class: "muted empty"},
          state.jobs.size ? "No job matches." : "No jobs yet. Start one with New job.")),
      );
      return;
    }
    if (!trOf.size) body.replaceChildren(); // (the empty table's line)
    draw(true);
    size(rows);
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
    for (const row of trOf.values()) {
      const job = row.dataset.job && state.jobs.get(row.dataset.job);
      if (job && !TERMINAL.has(job.TrainingJobStatus))
        row.querySelector("[data-col=duration]").textContent = fmtDuration(duration(job));
    }
  }, 1000);
  // scrolled: the rows near the view drawn (a scroll event comes before the frame it is drawn in)
  const scrolled = () => {
    if (list.length > ALL_ROWS) draw();
  };
  // another width: rows may wrap otherwise (a group's line), so each is measured again when drawn
  const resized = debounce(() => {
    measured.clear();
    for (const [key, tr] of trOf) measured.set(key, tr.getBoundingClientRect().height);
    offsetsStale = true;
    if (list.length) draw(true);
  }, 150);
  addEventListener("scroll", scrolled, {passive: true});
  addEventListener("resize", resized);
  load();
  return () => {
    stream.close();
    clearInterval(tick);
    removeEventListener("scroll", scrolled);
    cancelAnimationFrame(pending);
    removeEventListener("resize", resized);
    resized.cancel();
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
