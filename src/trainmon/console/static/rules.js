// A job's rules on its page: each rule configuration with its status, and what the rules found.

import {post} from "./api.js";
import {h, clear, fmtNum, fmtTime, foldedPanel, section, table} from "./dom.js";

/** Whether the job document names any rule (its statuses are there from the job's creation). */
export function hasRules(job) {
  return (job.DebugRuleEvaluationStatuses || []).length + (job.ProfilerRuleEvaluationStatuses || []).length > 0;
}

/** The panel of the job's rules, filled by ``update(job)`` from ListRuleFindings. */
export class RulesPanel {
  constructor(name) {
    this.name = name;
    this.el = h("div", {class: "rules", hidden: true});
    this.seen = null;
  }

  /** Read the rules again when their statuses changed (or on the first call). */
  async update(job) {
    if (!hasRules(job)) {
      this.el.hidden = true;
      return;
    }
    const statuses = JSON.stringify([
      job.DebugRuleEvaluationStatuses,
      job.ProfilerRuleEvaluationStatuses,
      job.RuleFindingCounts, // from the live stream: more findings of a rule already IssuesFound
    ]);
    if (statuses === this.seen) return;
    this.seen = statuses;
    let answer;
    try {
      answer = await post("/api/trainmon/ListRuleFindings", {TrainingJobName: this.name});
    } catch (exc) {
      this.seen = null; // try again at the next update
      clear(this.el, section("Rules", h("p", {class: "error"}, exc.message)));
      this.el.hidden = false;
      return;
    }
    this.show(answer);
  }

  show({Rules: rules, RuleFindings: findings}) {
    this.el.hidden = false;
    // folded below the charts, open when a rule found something (or as the user left it)
    const found = rules.filter((rule) => rule.RuleEvaluationStatus === "IssuesFound").length;
    this.folded = this.folded || {};
    const panel = foldedPanel(this.folded, "rules", found > 0, {class: "panel rules-panel"}, [
      h("h2", {}, "Rules"),
      h("span", {class: "muted"}, ` · ${rules.length} rule${rules.length === 1 ? "" : "s"}` +
        (found ? `, ${found} found issues` : ", no issues found")),
    ]);
    clear(
      this.el,
      panel,
    );
    panel.append(
      h("div", {},
        h(
          "table",
          {class: "rule-statuses"},
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ["Rule", "Kind", "Status", "Findings", "Details"].map((x) => h("th", {}, x)),
            ),
          ),
          h(
            "tbody",
            {},
            rules.map((rule) =>
              h(
                "tr",
                {"data-rule": rule.RuleConfigurationName},
                h(
                  "td",
                  {},
                  rule.RuleConfigurationName,
                  rule.RuleName && rule.RuleName !== rule.RuleConfigurationName
                    ? h("span", {class: "muted small"}, ` (${rule.RuleName})`)
                    : null,
                ),
                h("td", {}, rule.Kind),
                h(
                  "td",
                  {},
                  h(
                    "span",
                    {class: "rule-status", "data-status": rule.RuleEvaluationStatus || "Unknown"},
                    rule.RuleEvaluationStatus || "–",
                  ),
                ),
                h("td", {class: "num"}, fmtNum(rule.FindingCount)),
                h("td", {class: "details"}, details(rule)),
              ),
            ),
          ),
        ),
        h("h3", {}, "Findings"),
        findings.length
          ? table(
              ["Time", "Rule", "Host", "Step", "On", "Value", "Finding"],
              findings.map((f) => [
                fmtTime(f.Time),
                f.RuleConfigurationName,
                f.Host,
                f.Step ?? "–",
                f.Tensor || f.Metric || "–",
                values(f),
                f.Message,
              ]),
              {class: "rule-findings"},
            )
          : h("p", {class: "muted"}, "No findings."),
      ),
    );
  }
}

/** A rule's StatusDetails without SageMaker's first line when a finding's words follow it. */
function details(rule) {
  const text = rule.StatusDetails || "";
  const lines = text.split("\n");
  return lines.length > 1 && lines[0].startsWith("RuleEvaluationConditionMet") ? lines.slice(1).join(" ") : text;
}

/** A finding's values against its thresholds, as "name value (threshold)". */
function values(finding) {
  const shown = Object.entries(finding.Values || {}).map(([k, v]) => `${k} ${fmtNum(v)}`);
  const limits = Object.entries(finding.Thresholds || {}).map(([k, v]) => `${k} ${fmtNum(v)}`);
  return [shown.join(", "), limits.length ? ` (${limits.join(", ")})` : ""].join("");
}
