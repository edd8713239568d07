// The alarms pages: every CloudWatch alarm with its state, a form for a new one on a job's metric,
// and one alarm's configuration and history, with its actions turned on or off.

import {get, post} from "./api.js";
import {h, clear, debounce, field, fmtNum, fmtTime, section, table} from "./dom.js";
import {navigate} from "./router.js";

const JOB_NAMESPACE = "/aws/sagemaker/TrainingJobs";
const COMPARISONS = [
  ["GreaterThanThreshold", ">"],
  ["GreaterThanOrEqualToThreshold", "≥"],
  ["LessThanThreshold", "<"],
  ["LessThanOrEqualToThreshold", "≤"],
];
const SIGN = Object.fromEntries(COMPARISONS);
const REFRESH_MS = 5000;

const cloudwatch = (operation, request) => post(`/api/cloudwatch/${operation}`, request);

export function stateBadge(state) {
  return h("span", {class: "alarm-state", "data-state": state || "Unknown"}, (state || "Unknown").replace("_", " "));
}

/** What an alarm watches, in a line: the metric and its dimensions, or its expression. */
export function watched(alarm) {
  if (alarm.Metrics) {
    const shown = alarm.Metrics.find((m) => m.ReturnData !== false) || alarm.Metrics[0];
    return shown.Expression ? `${shown.Expression} (metric math)` : shown.Id;
  }
  const dims = (alarm.Dimensions || []).map((d) => `${d.Name}=${d.Value}`).join(", ");
  return `${alarm.Namespace} ${alarm.MetricName}${dims ? ` {${dims}}` : ""}`;
}

/** Its condition: "Maximum > 4 for 2 of 3 periods of 60 s". */
export function condition(alarm) {
  const stat = alarm.ExtendedStatistic || alarm.Statistic || "";
  const m = alarm.EvaluationPeriods;
  const n = alarm.DatapointsToAlarm || m;
  const period = alarm.Period ? ` of ${alarm.Period} s` : "";
  return `${stat} ${SIGN[alarm.ComparisonOperator] || alarm.ComparisonOperator} ${fmtNum(alarm.Threshold)} for ${n} of ${m} period${m === 1 ? "" : "s"}${period}`;
}

export function mount(root, {name}) {
  return name ? mountAlarm(root, name) : mountList(root);
}

// -- every alarm ------------------------------------------------------------------------------

function mountList(root) {
  document.title = "Alarms · trainmon";
  const error = h("p", {class: "error", hidden: true});
  const body = h("div", {class: "table-wrap"});
  const form = alarmForm(() => load());
  clear(
    root,
    h("div", {class: "page-head"}, h("h1", {}, "Alarms")),
    error,
    body,
    h("details", {class: "panel new-alarm"}, h("summary", {}, "New alarm on a job's metric"), form),
  );
  let shown = "";

  async function load() {
    try {
      const alarms = [];
      let token;
      do {
        const page = await cloudwatch("DescribeAlarms", token ? {NextToken: token} : {});
        alarms.push(...page.MetricAlarms);
        token = page.NextToken;
      } while (token);
      error.hidden = true;
      const seen = JSON.stringify(alarms);
      if (seen !== shown) {
        shown = seen;
        render(alarms);
      }
    } catch (exc) {
      error.hidden = false;
      error.textContent = exc.message;
    }
  }

  function render(alarms) {
    if (!alarms.length) {
      clear(body, h("p", {class: "muted empty"}, "No alarms yet."));
      return;
    }
    clear(
      body,
      h(
        "table",
        {class: "alarms"},
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["Name", "State", "Watches", "Condition", "Actions", "Since", "Reason"].map((x) => h("th", {}, x)),
          ),
        ),
        h(
          "tbody",
          {},
          alarms.map((a) =>
            h(
              "tr",
              {"data-alarm": a.AlarmName},
              h("td", {}, h("a", {href: `/alarms/${encodeURIComponent(a.AlarmName)}`}, a.AlarmName)),
              h("td", {}, stateBadge(a.StateValue)),
              h("td", {}, watched(a)),
              h("td", {}, condition(a)),
              h("td", {}, a.ActionsEnabled ? "on" : "off"),
              h("td", {}, fmtTime(a.StateTransitionedTimestamp || a.StateUpdatedTimestamp)),
              h("td", {class: "reason"}, a.StateReason),
            ),
          ),
        ),
      ),
    );
  }

  load();
  const timer = setInterval(load, REFRESH_MS);
  return () => clearInterval(timer);
}

/** The form for an alarm on a job's metric, or on one host's system metric. */
function alarmForm(onCreated) {
  const input = (name, props = {}) => h("input", {type: "text", name, spellcheck: "false", ...props});
  const select = (name, options, value) =>
    h(
      "select",
      {name},
      options.map(([v, label]) => h("option", {value: v, selected: v === value}, label)),
    );
  const els = {
    name: input("alarm-name", {required: true, placeholder: "loss-spike"}),
    job: input("job", {required: true, placeholder: "the job's name"}),
    metric: input("metric", {required: true, placeholder: "train:loss, or CPUUtilization with a host"}),
    host: input("host", {placeholder: "algo-1: a host's system metric"}),
    statistic: select(
      "statistic",
      ["Average", "Maximum", "Minimum", "Sum", "SampleCount", "p99", "p90", "p50"].map((s) => [s, s]),
      "Maximum",
    ),
    period: input("period", {value: "60", inputmode: "numeric"}),
    comparison: select(
      "comparison",
      COMPARISONS.map(([v, sign]) => [v, `${sign} (${v})`]),
      "GreaterThanThreshold",
    ),
    threshold: input("threshold", {required: true, inputmode: "decimal"}),
    periods: input("evaluation-periods", {value: "1", inputmode: "numeric"}),
    datapoints: input("datapoints-to-alarm", {placeholder: "as many as the periods", inputmode: "numeric"}),
    missing: select(
      "treat-missing-data",
      ["missing", "notBreaching", "breaching", "ignore"].map((s) => [s, s]),
      "missing",
    ),
    action: input("alarm-action", {placeholder: "exec:notify-send loss, or https://…"}),
  };
  // what exists to pick from: the jobs, then the chosen job's metrics (its own and its hosts' system
  // metrics) and hosts
  const lists = {job: h("datalist", {id: "alarm-jobs"}), metric: h("datalist", {id: "alarm-metrics"}),
    host: h("datalist", {id: "alarm-hosts"})};
  for (const [key, list] of Object.entries(lists)) els[key].setAttribute("list", list.id);
  const options = (list, values) => list.replaceChildren(...[...new Set(values)].map((v) => h("option", {value: v})));
  get("/api/jobs", {limit: 100}).then(
    (answer) => options(lists.job, answer.TrainingJobSummaries.map((j) => j.TrainingJobName)),
    () => {},
  );
  let picked = "";
  const pickJob = async () => {
    const job = els.job.value.trim();
    if (!job || job === picked) return;
    picked = job;
    try {
      const [described, system] = await Promise.all([
        get(`/api/jobs/${encodeURIComponent(job)}`),
        get(`/api/jobs/${encodeURIComponent(job)}/system`).catch(() => ({Metrics: []})),
      ]);
      if (picked !== job) return;
      const own = (described.Metrics.Metrics || []).map((m) => m.MetricName);
      options(lists.metric, [...own, ...(system.Metrics || []).map((m) => m.MetricName)]);
      const count = described.Job.ResourceConfig?.InstanceCount || 1;
      options(lists.host, Array.from({length: count}, (_, i) => `algo-${i + 1}`));
    } catch {
      options(lists.metric, []);
    }
  };
  els.job.addEventListener("change", pickJob);
  els.job.addEventListener("input", debounce(pickJob, 300));
  const message = h("p", {class: "form-error", hidden: true});
  const form = h(
    "form",
    {class: "create alarm-form", novalidate: true},
    ...Object.values(lists),
    h(
      "div",
      {class: "fields"},
      field("Name", els.name),
      field("Job", els.job),
      field("Metric", els.metric),
      field("Host", els.host, "Only for a host's system metric"),
      field("Statistic", els.statistic),
      field("Period (s)", els.period),
      field("Comparison", els.comparison),
      field("Threshold", els.threshold),
      field("Evaluation periods", els.periods),
      field("Datapoints to alarm", els.datapoints),
      field("Missing data", els.missing),
      field("Alarm action", els.action, "Run or POST to, with the change as JSON"),
    ),
    message,
    h("div", {class: "actions"}, h("button", {type: "submit", class: "primary", name: "create-alarm"}, "Create alarm")),
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const stat = els.statistic.value;
    const host = els.host.value.trim();
    const request = {
      AlarmName: els.name.value.trim(),
      Namespace: JOB_NAMESPACE,
      MetricName: els.metric.value.trim(),
      Dimensions: [
        host
          ? {Name: "Host", Value: `${els.job.value.trim()}/${host}`}
          : {Name: "TrainingJobName", Value: els.job.value.trim()},
      ],
      Period: Number(els.period.value),
      ComparisonOperator: els.comparison.value,
      Threshold: els.threshold.value.trim() === "" ? undefined : Number(els.threshold.value),
      EvaluationPeriods: Number(els.periods.value),
      TreatMissingData: els.missing.value,
    };
    if (/^p\d/.test(stat)) request.ExtendedStatistic = stat;
    else request.Statistic = stat;
    if (els.datapoints.value.trim()) request.DatapointsToAlarm = Number(els.datapoints.value);
    if (els.action.value.trim()) request.AlarmActions = [els.action.value.trim()];
    try {
      await cloudwatch("PutMetricAlarm", request);
      message.hidden = true;
      form.reset();
      onCreated();
    } catch (exc) {
      message.hidden = false;
      message.textContent = exc.message;
    }
  });
  return form;
}

// -- one alarm --------------------------------------------------------------------------------

function mountAlarm(root, name) {
  document.title = `${name} · Alarms · trainmon`;
  const head = h("div", {class: "page-head"});
  const facts = h("div");
  const history = h("div");
  const graph = h("div");
  const error = h("p", {class: "error", hidden: true});
  clear(root, h("a", {href: "/alarms", class: "muted back"}, "← Alarms"), head, error, facts, graph, history);
  let shown = "";

  async function act(operation, request) {
    try {
      await cloudwatch(operation, request);
      await load();
    } catch (exc) {
      error.hidden = false;
      error.textContent = exc.message;
    }
  }

  async function load() {
    let alarm, items;
    try {
      const found = await cloudwatch("DescribeAlarms", {AlarmNames: [name]});
      alarm = found.MetricAlarms[0];
      if (!alarm) {
        clear(head, h("h1", {}, name));
        clear(facts, h("p", {class: "error"}, "There is no such alarm (it may have been deleted)."));
        clear(history);
        return;
      }
      items = (await cloudwatch("DescribeAlarmHistory", {AlarmName: name, MaxRecords: 100})).AlarmHistoryItems;
    } catch (exc) {
      error.hidden = false;
      error.textContent = exc.message;
      return;
    }
    const seen = JSON.stringify([alarm, items]);
    if (seen === shown) return;
    shown = seen;
    error.hidden = true;
    render(alarm, items);
  }

  function render(alarm, items) {
    clear(
      head,
      h("div", {}, h("h1", {}, alarm.AlarmName), h("div", {class: "status-line"}, stateBadge(alarm.StateValue))),
      h(
        "div",
        {class: "actions"},
        h(
          "button",
          {
            type: "button",
            name: "toggle-actions",
            onclick: () =>
              act(alarm.ActionsEnabled ? "DisableAlarmActions" : "EnableAlarmActions", {AlarmNames: [name]}),
          },
          alarm.ActionsEnabled ? "Disable actions" : "Enable actions",
        ),
        h(
          "button",
          {
            type: "button",
            class: "danger",
            name: "delete",
            onclick: async () => {
              if (!confirm(`Delete the alarm ${name}?`)) return;
              await act("DeleteAlarms", {AlarmNames: [name]});
              navigate("/alarms");
            },
          },
          "Delete",
        ),
      ),
    );
    const actions = [
      ["ALARM", alarm.AlarmActions],
      ["OK", alarm.OKActions],
      ["INSUFFICIENT_DATA", alarm.InsufficientDataActions],
    ].filter(([, targets]) => (targets || []).length);
    clear(
      facts,
      section(
        "Alarm",
        h(
          "dl",
          {class: "facts"},
          fact("Watches", watched(alarm)),
          fact("Condition", condition(alarm)),
          fact("Missing data", alarm.TreatMissingData || "missing"),
          fact("State since", fmtTime(alarm.StateTransitionedTimestamp || alarm.StateUpdatedTimestamp)),
          fact("Actions", alarm.ActionsEnabled ? "enabled" : "disabled"),
        ),
        alarm.AlarmDescription ? h("p", {}, alarm.AlarmDescription) : null,
        h("p", {class: "reason"}, alarm.StateReason),
        actions.length
          ? table(
              ["On", "Action"],
              actions.flatMap(([state, targets]) => targets.map((t) => [state, h("code", {}, t)])),
              {class: "alarm-actions"},
            )
          : h("p", {class: "muted"}, "No actions."),
      ),
    );
    alarmGraph(alarm, items).then(
      (drawn) => clear(graph, section("Metric and threshold", drawn)),
      (exc) => clear(graph, section("Metric and threshold", h("p", {class: "error"}, exc.message))),
    );
    clear(
      history,
      section(
        "History",
        items.length
          ? table(
              ["Time", "Type", "Summary"],
              items.map((i) => [fmtTime(i.Timestamp), i.HistoryItemType, i.HistorySummary]),
              {class: "alarm-history"},
            )
          : h("p", {class: "muted"}, "Nothing yet."),
      ),
    );
  }

  load();
  const timer = setInterval(load, REFRESH_MS);
  return () => clearInterval(timer);
}

// -- the alarm's metric over its recent windows, its threshold, and its state changes

const STATE_COLORS = {ALARM: "#dc2626", OK: "#059669", INSUFFICIENT_DATA: "#6b7280"};

/** The metric the alarm watches (its statistic per period, or its metric math), over ten of its
 * evaluation windows and at least the last hour, with the threshold as a line and each state
 * change as a mark; for tests, the counts are on the section (data-points, data-changes). */
async function alarmGraph(alarm, items) {
  const period = alarm.Period || 60;
  const end = Date.now() / 1000;
  const changes = items
    .filter((i) => i.HistoryItemType === "StateUpdate")
    .map((i) => {
      try {
        return {t: i.Timestamp, state: JSON.parse(i.HistoryData).newState.stateValue};
      } catch {
        return null;
      }
    })
    .filter(Boolean);
  const earliest = Math.min(end - Math.max(period * (alarm.EvaluationPeriods || 1) * 10, 3600),
    ...changes.map((c) => c.t - period));
  const start = Math.floor(earliest / period) * period;
  const queries = alarm.Metrics || [
    {
      Id: "m",
      MetricStat: {
        Metric: {Namespace: alarm.Namespace, MetricName: alarm.MetricName, Dimensions: alarm.Dimensions || []},
        Period: period,
        Stat: alarm.ExtendedStatistic || alarm.Statistic,
      },
      ReturnData: true,
    },
  ];
  const answer = await cloudwatch("GetMetricData", {
    MetricDataQueries: queries,
    StartTime: start,
    EndTime: end + period,
    ScanBy: "TimestampAscending",
  });
  const result = answer.MetricDataResults.find((r) => r.Values.length) || answer.MetricDataResults[0] || {};
  const times = result.Timestamps || [];
  const values = result.Values || [];
  const xs = [start, ...times.filter((t) => t > start && t < end), end];
  const at = new Map(times.map((t, i) => [t, values[i]]));
  const ys = xs.map((t) => (at.has(t) ? at.get(t) : null));
  const threshold = typeof alarm.Threshold === "number" ? xs.map(() => alarm.Threshold) : xs.map(() => null);
  const el = h("div", {
    class: "alarm-graph",
    "data-points": values.length,
    "data-changes": changes.filter((c) => c.t >= start).length,
    "data-threshold": alarm.Threshold ?? "",
  });
  const marks = {
    hooks: {
      draw: [
        (u) => {
          const {ctx} = u;
          ctx.save();
          for (const change of changes) {
            const x = u.valToPos(change.t, "x", true);
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
            ctx.strokeStyle = STATE_COLORS[change.state] || "#6b7280";
            ctx.lineWidth = 2 * devicePixelRatio;
            ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
            ctx.beginPath();
            ctx.moveTo(x, u.bbox.top);
            ctx.lineTo(x, u.bbox.top + u.bbox.height);
            ctx.stroke();
            ctx.fillStyle = ctx.strokeStyle;
            ctx.font = `${11 * devicePixelRatio}px sans-serif`;
            const text = ctx.measureText(change.state).width;
            const right = x + 4 * devicePixelRatio + text > u.bbox.left + u.bbox.width; // near the edge: to its left
            ctx.fillText(change.state, right ? x - 4 * devicePixelRatio - text : x + 4 * devicePixelRatio,
              u.bbox.top + 12 * devicePixelRatio);
          }
          ctx.restore();
        },
      ],
    },
  };
  const width = Math.max(320, (document.getElementById("app")?.clientWidth || 960) - 60);
  new window.uPlot(
    {
      width,
      height: 240,
      plugins: [marks],
      scales: {x: {time: true}},
      series: [
        {label: "time", value: (u, v) => (v == null ? "–" : fmtTime(v))},
        {
          label: alarm.Metrics ? "metric math" : `${alarm.ExtendedStatistic || alarm.Statistic} of ${alarm.MetricName}`,
          stroke: "#2563eb",
          width: 1.5,
          spanGaps: false,
          points: {size: 6, fill: "#2563eb"},
          value: (u, v) => (v == null ? "–" : fmtNum(v)),
        },
        {label: "threshold", stroke: "#dc2626", width: 1, dash: [6, 4], points: {show: false}},
      ],
      axes: [{}, {size: 60}],
    },
    [xs, ys, threshold],
    el,
  );
  return el;
}

function fact(label, value) {
  return h("div", {}, h("dt", {}, label), h("dd", {}, value));
}
