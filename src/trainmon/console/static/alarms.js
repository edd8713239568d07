// The alarms pages: every CloudWatch alarm with its state, a form for a new one on a job's metric,
// and one alarm's configuration and history, with its actions turned on or off.

import {post} from "./api.js";
import {h, clear, field, fmtNum, fmtTime, section, table} from "./dom.js";
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
  const message = h("p", {class: "form-error", hidden: true});
  const form = h(
    "form",
    {class: "create alarm-form", novalidate: true},
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
  const error = h("p", {class: "error", hidden: true});
  clear(root, h("a", {href: "/alarms", class: "muted back"}, "← Alarms"), head, error, facts, history);
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

function fact(label, value) {
  return h("div", {}, h("dt", {}, label), h("dd", {}, value));
}
