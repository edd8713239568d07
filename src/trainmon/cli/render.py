"""Human-readable views for the CLI (plain text; JSON output is the operations' responses as they are).

Text that comes from a job (its output, its failure reason, what a definition saw) goes through
:func:`terminal_safe` before it reaches a terminal, so that it cannot move the cursor or change
the terminal; the store keeps it exact.
"""

from __future__ import annotations

import math
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ..cloudwatch.statistics import PeriodRow
from ..jobs.status import TERMINAL
from ..parsing.framing import escape
from ..units import byte_text

# Control characters but tab, DEL, the C1 controls and the bidirectional overrides (which reorder
# what the terminal shows); the second leaves line breaks alone.
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_IN_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\r": "\\r", "\n": "\\n", "\b": "\\b"}


def terminal_safe(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every character that could drive a terminal shown as an escape (``\\x1b``);
    with ``keep_newlines``, lines of text whose breaks stay breaks."""
    if text.isprintable():
        return text
    return (_UNSAFE_IN_LINES if keep_newlines else _UNSAFE).sub(_shown, text)


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def quoted(text: str) -> str:
    """Text in quotes as it is (a regex's backslashes stay single), made safe for a terminal."""
    return f"'{terminal_safe(text)}'"


def clock(epoch_s: float | datetime | None, *, date: bool = False) -> str:
    if epoch_s is None:
        return "-"
    moment = epoch_s if isinstance(epoch_s, datetime) else datetime.fromtimestamp(epoch_s, tz=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC" if date else "%H:%M:%S.%f")[: None if date else -3]


def number(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.6g}"


def quantity(value: float | None, unit: str | None) -> str:
    """A value with its CloudWatch unit: ``42.5%``, ``1.50 GiB``, ``3.20 MiB/s``; plain without one."""
    if value is None or not math.isfinite(value) or unit in (None, "None", "Count"):
        return number(value)
    if unit == "Percent":
        return f"{value:.4g}%"
    if unit in ("Bytes", "Bytes/Second"):
        return byte_text(value, unit)
    return f"{number(value)} {unit}"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], indent: str = "  ") -> str:
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in cells]
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, str]], indent: str = "  ") -> list[str]:
    """Labelled lines with the values aligned, whatever the longest label."""
    width = max((len(label) for label, _ in pairs), default=0)
    return [f"{indent}{label.ljust(width)}  {value}" for label, value in pairs]


def status_text(doc: Mapping[str, Any]) -> str:
    """``Completed``; the secondary status in brackets only when it says more (``Stopped (MaxRuntimeExceeded)``)."""
    primary, secondary = doc["TrainingJobStatus"], doc.get("SecondaryStatus")
    return primary if not secondary or secondary == primary else f"{primary} ({secondary})"


def describe(doc: Mapping[str, Any], metrics: Mapping[str, Any]) -> str:
    """A DescribeTrainingJob answer with the job's DescribeJobMetrics: the command its hosts ran,
    metric summaries and definition diagnostics."""
    lines = [f"Training job {doc['TrainingJobName']}: {status_text(doc)}"]
    image = metrics.get("Image") or (f"{metrics['AbsentImage']} (not on this machine: its hosts ran as processes)"
                                     if "AbsentImage" in metrics else None)
    lines.extend(fields(_facts(doc, metrics["Command"], metrics.get("HostPlacements", []), image,
                               metrics.get("WorkingDirectory"))))
    if doc.get("FailureReason"):
        lines += ["", "Failure reason"]
        lines.extend("  " + terminal_safe(line) for line in doc["FailureReason"].splitlines())
    unstored = metrics.get("UnstoredOutput")
    if unstored:
        lines += ["", "Not stored",
                  f"  {unstored['Records']} log records ({unstored['Bytes']} bytes) and {unstored['Points']} metric "
                  f"points could not be stored: {terminal_safe(unstored['Reason'])}"]
    lines += ["", "Status transitions", table(
        ["STATUS", "START", "SECONDS", "MESSAGE"],
        [[t["Status"], clock(t["StartTime"]),
          f"{(t['EndTime'] - t['StartTime']).total_seconds():.1f}" if t.get("EndTime") is not None else "...",
          t.get("StatusMessage", "")] for t in doc.get("SecondaryStatusTransitions", [])])]
    statuses = [*doc.get("DebugRuleEvaluationStatuses", []), *doc.get("ProfilerRuleEvaluationStatuses", [])]
    if statuses:
        lines += ["", "Rules", table(["RULE", "STATUS", "DETAILS"], [
            [terminal_safe(s["RuleConfigurationName"]), s["RuleEvaluationStatus"], _details(s.get("StatusDetails"))]
            for s in statuses])]
        lines.extend(f"  {terminal_safe(s['RuleConfigurationName'])}: {terminal_safe(line)}" for s in statuses
                     for line in _detail_lines(s.get("StatusDetails"))[1:] if line.startswith(_REPORT_LINES))
    lines += ["", _final_heading(doc, unstored)]
    if metrics["Metrics"]:
        lines.append(table(["METRIC", "FINAL", "AT", "POINTS", "MIN", "MAX"], [
            [m["MetricName"], number(m.get("FinalValue")), clock(m.get("FinalTimestamp")), m["Points"],
             number(m["Minimum"]), number(m["Maximum"])] for m in metrics["Metrics"]]))
    else:
        lines.append(f"  {_no_metrics(doc)}")
    warnings = metrics.get("Warnings", [])
    if metrics["Definitions"] or warnings:
        lines += ["", "Metric definitions"]
        lines.extend(f"  warning: {terminal_safe(warning)}" for warning in warnings)
        lines.extend(definition_report(metrics["Definitions"], doc["AlgorithmSpecification"].get("MetricDefinitions", []),
                                       escapes=metrics["RecordMode"] != "raw"))
    return "\n".join(lines)


def _facts(doc: Mapping[str, Any], command: Sequence[str], placements: Sequence[Mapping[str, str]] = (),
           image: str | None = None, directory: str | None = None) -> list[tuple[str, str]]:
    """The job's facts; ``command`` is what its hosts ran (DescribeJobMetrics' Command), ``placements``
    the Ray nodes they ran on, ``image`` what they ran in (containers), ``directory`` where (a command
    line)."""
    facts = [("ARN", doc["TrainingJobArn"]), ("Created", clock(doc["CreationTime"], date=True))]
    if doc.get("TrainingTimeInSeconds"):
        facts.append(("Training time", f"{doc['TrainingTimeInSeconds']} s (billable {doc['BillableTimeInSeconds']} s)"))
    if image:
        facts.append(("Image", terminal_safe(image)))
    if command:
        facts.append(("Command", terminal_safe(shlex.join(command))))
    if directory:
        facts.append(("Directory", terminal_safe(directory)))
    resources = doc["ResourceConfig"]
    facts.append(("Hosts", f"{resources['InstanceCount']} x {resources['InstanceType']}"))
    for placed in placements:
        facts.append(("Node", terminal_safe(f"{placed['Host']}: {placed['Hostname']} {placed['Address']} "
                                            f"(Ray node {placed['NodeId'][:12]})")))
    if doc.get("HyperParameters"):
        facts.append(("Hyperparameters", terminal_safe(", ".join(f"{k}={v}" for k, v in doc["HyperParameters"].items()))))
    for channel in doc.get("InputDataConfig", []):
        facts.append(("Channel", f"{channel['ChannelName']}: {channel['DataSource']['S3DataSource']['S3Uri']}"))
    if doc["TrainingJobStatus"] in ("Completed", "Stopped"):
        facts.append(("Model", doc["ModelArtifacts"]["S3ModelArtifacts"]))
    return facts


_REPORT_LINES = ("Profiling report: ", "The profiling report was not written")  # ProfilerReport's


def _detail_lines(details: str | None) -> list[str]:
    """A rule's StatusDetails without SageMaker's first line: what it found, then its notes (profiler rules)."""
    lines = (details or "").strip().splitlines()
    return lines[1:] if len(lines) > 1 and lines[0].startswith("RuleEvaluationConditionMet") else lines


def _details(details: str | None) -> str:
    """A rule's StatusDetails in one line: what it found (after SageMaker's line), else its first line,
    with how many more there are (a profiler rule's notes; ``trainmon rules`` shows them)."""
    lines = _detail_lines(details)
    if not lines:
        return ""
    more = f" (+{len(lines) - 1} more: trainmon rules)" if len(lines) > 1 else ""
    return terminal_safe(lines[0] + more)


def rules(answer: Mapping[str, Any], job_name: str) -> str:
    """ListRuleFindings' answer: each rule (status, findings, actions, parameters), then the findings."""
    if not answer["Rules"]:
        return f"job {job_name} has no rules: add some with trainmon run --rule (see docs/rules.md)"
    lines = [f"Rules of job {job_name}", table(["RULE", "KIND", "STATUS", "FINDINGS", "ACTIONS"], [
        [terminal_safe(r["RuleConfigurationName"]) + (f" ({r['RuleName']})" if r["RuleName"] != r[
            "RuleConfigurationName"] else ""), r["Kind"], r.get("RuleEvaluationStatus", "-"), r["FindingCount"],
         terminal_safe(", ".join(r["Actions"])) or "-"] for r in answer["Rules"]])]
    for rule in answer["Rules"]:
        shown = ", ".join(f"{key}={value}" for key, value in sorted(rule["Parameters"].items()))
        lines.append(f"  {terminal_safe(rule['RuleConfigurationName'])}: {terminal_safe(shown) or 'no parameters'}")
        if rule.get("RuleEvaluationStatus") is not None:  # what found is below; then the notes
            shown_lines = _detail_lines(rule.get("StatusDetails"))[rule["RuleEvaluationStatus"] == "IssuesFound":]
            lines.extend(f"      {terminal_safe(line)}" for line in shown_lines)
    findings = answer["RuleFindings"]
    counted = sum(r["FindingCount"] for r in answer["Rules"])
    heading = "Findings" + (f" ({len(findings)} of {counted} kept)" if counted > len(findings) else "")
    lines += ["", heading]
    if not findings:
        lines.append("  (none" + (" yet)" if any(r.get("RuleEvaluationStatus") == "InProgress"
                                                 for r in answer["Rules"]) else ")"))
        return "\n".join(lines)
    lines.append(table(["TIME", "HOST", "RULE", "STEP", "FINDING"], [
        [clock(f["Time"]), f["Host"], terminal_safe(f["RuleConfigurationName"]), f.get("Step", "-"),
         terminal_safe(f["Message"])] for f in findings]))
    return "\n".join(lines)


def _final_heading(doc: Mapping[str, Any], unstored: Mapping[str, Any] | None) -> str:
    if unstored and unstored["Points"]:
        lost = unstored["Points"]
        return f"Final metrics (from the points stored; {lost} point{'s were' if lost != 1 else ' was'} not stored)"
    return "Final metrics"


def _no_metrics(doc: Mapping[str, Any]) -> str:
    defined = doc["AlgorithmSpecification"].get("MetricDefinitions", [])
    ended = doc["TrainingJobStatus"] in TERMINAL
    if not defined:
        return "(none: the job has no metric definitions)"
    return "(none: no definition matched; see below)" if ended else "(none yet)"


def definition_report(stats: list[dict[str, Any]], definitions: list[dict[str, str]], *,
                      escapes: bool = True) -> list[str]:
    """Per definition (its diagnostics, as stored, in the order of ``definitions``): matches, rejected
    captures and why, and near misses when nothing matched. A name that several definitions share is
    followed by the definition's position. The literal a regex needs is shown as the regex sees
    records: with ``#011`` for a tab in the escaping modes."""
    regexes = [d["Regex"] for d in definitions]
    shared = {name for name, count in Counter(d["Name"] for d in definitions).items() if count > 1}
    lines = []
    for index, s in enumerate(stats):
        matches, rejected = s.get("Matches", 0), dict(s.get("Rejected", {}))
        label = f"{s['Name']} (MetricDefinitions[{index + 1}])" if s["Name"] in shared else s["Name"]
        parts = [f"{matches} point{'s' if matches != 1 else ''}"]
        if s.get("NonFinite"):
            parts.append(f"{s['NonFinite']} NaN/infinite (kept, left out of statistics)")
        if rejected:
            why = "; ".join(f"{count} {reason}" for reason, count in sorted(rejected.items()))
            parts.append(f"{sum(rejected.values())} rejected ({why})")
        lines.append(f"  {label}: " + ", ".join(parts))
        if s.get("RejectedExamples"):
            lines.append("      rejected, e.g.: " + " | ".join(quoted(e) for e in s["RejectedExamples"]))
        if matches == 0:
            regex = quoted(regexes[index] if index < len(regexes) else "")
            literal = s.get("Prefilter")
            shown = quoted(escape(literal) if escapes else literal) if literal else None
            if s.get("UnmatchedExamples"):
                lines.append(f"      regex {regex} did not match records holding {shown}, e.g.:")
                lines.extend(f"        {quoted(e)}" for e in s["UnmatchedExamples"])
            elif rejected:
                pass  # the records it found were rejected, and the line above says why
            elif literal and s.get("NearMiss"):
                lines.append(f"      no record contains {shown}, but {terminal_safe(s['NearMiss'])}")
            elif literal:
                lines.append(f"      no record contains {shown}: check the spelling in regex {regex}")
            else:
                lines.append(f"      no record matched regex {regex}")
    return lines


def periods(rows: list[PeriodRow], units: Mapping[str, str | None] | None = None) -> str:
    units = units or {}
    return table(
        ["METRIC", "PERIOD START", "COUNT", "AVERAGE", "MIN", "MAX", "LAST"],
        [[r.name, clock(r.start_ms / 1000), r.count,
          *(quantity(v, units.get(r.name)) for v in (r.average, r.minimum, r.maximum, r.last))] for r in rows],
    )


def search_results(jobs: list[dict[str, Any]], names: list[str], hits: dict[str, Any]) -> str:
    """Search's jobs with a column for each property the search read or sorted by."""
    shown = [name for name in dict.fromkeys(names) if name not in ("TrainingJobName", "TrainingJobStatus")]
    rows = [[job["TrainingJobName"], job["TrainingJobStatus"], *(property_text(job, name) for name in shown)]
            for job in jobs]
    more = "at least " if hits["Relation"] != "EqualTo" else ""
    return (table(["NAME", "STATUS", *shown], rows) +
            f"\n  {len(jobs)} of {more}{hits['Value']:,} matching job{'s' if hits['Value'] != 1 else ''}")


def property_text(job: dict[str, Any], name: str) -> str:
    """A property of Search's TrainingJob as text, "-" where the job has none."""
    head, _, rest = name.partition(".")
    if head == "Metrics":
        values: list[Any] = [m["Value"] for m in job.get("FinalMetricDataList", []) if m["MetricName"] == rest]
    elif head == "Tags":
        values = [tag["Value"] for tag in job.get("Tags", []) if tag["Key"] == rest]
    elif head in ("HyperParameters", "Environment"):
        values = [job.get(head, {}).get(rest)]
    else:
        values = [job]
        for key in name.split("."):
            values = [item for value in values for item in (value if isinstance(value, list) else [value])]
            values = [value.get(key) for value in values if isinstance(value, dict)]
    shown = [terminal_safe(number(v) if isinstance(v, float) else clock(v, date=True) if isinstance(v, datetime)
                           else str(v)) for v in values if v is not None]
    return ", ".join(shown) or "-"


def job_list(summaries: list[dict[str, Any]], now_s: float) -> str:
    """ListTrainingJobs' summaries; a job's duration is from its creation to its end, or to now."""

    def duration(summary: dict[str, Any]) -> str:
        end = summary.get("TrainingEndTime")
        seconds = (end.timestamp() if end is not None else now_s) - summary["CreationTime"].timestamp()
        return f"{max(0.0, seconds):.0f} s"

    return table(
        ["NAME", "STATUS", "SECONDARY", "CREATED", "DURATION"],
        [[s["TrainingJobName"], s["TrainingJobStatus"], s.get("SecondaryStatus", ""),
          clock(s["CreationTime"], date=True), duration(s)] for s in summaries],
    )


def _objective(trial: Mapping[str, Any]) -> str:
    metric = trial.get("FinalHyperParameterTuningJobObjectiveMetric")
    return number(metric["Value"]) if metric else "-"


def _tuned(value: str) -> str:
    """A tuned value as a person reads it: a long fraction to 4 significant digits."""
    try:
        return f"{float(value):.4g}" if "." in value else value
    except ValueError:
        return value


def trial_line(trial: Mapping[str, Any]) -> str:
    """One trial as it ends: its name, status, objective and tuned hyperparameters."""
    tuned = " ".join(f"{key}={_tuned(value)}" for key, value in sorted(trial["TunedHyperParameters"].items()))
    return terminal_safe(f"  {trial['TrainingJobName']}  {trial['TrainingJobStatus']:<9}  {_objective(trial):>12}  "
                         f"{tuned}")


_COUNTED = {"InProgress": "running", "RetryableError": "failed (retryable)", "NonRetryableError": "failed"}


def tuning(described: Mapping[str, Any], trials: Sequence[Mapping[str, Any]]) -> str:
    """A tuning job: its status, objective and counters, the best trial, and every trial, best first."""
    config = described["HyperParameterTuningJobConfig"]
    goal = config.get("HyperParameterTuningJobObjective") or {}
    jobs, goals = described["TrainingJobStatusCounters"], described["ObjectiveStatusCounters"]
    lines = [f"tuning job {described['HyperParameterTuningJobName']}: {described['HyperParameterTuningJobStatus']}"]
    facts = [("strategy", config["Strategy"]),
             ("objective", f"{goal.get('Type', '').lower()} {goal.get('MetricName', '')}".strip()),
             ("trials", ", ".join(f"{count} {_COUNTED.get(name, name.lower())}" for name, count in jobs.items()
                                  if count) or "none yet"),
             ("objectives", ", ".join(f"{count} {name.lower()}" for name, count in goals.items() if count) or "-")]
    best = described.get("BestTrainingJob")
    if best:
        facts.append(("best", f"{best['TrainingJobName']}  {_objective(best)}"))
    if "FailureReason" in described:
        facts.append(("failure", described["FailureReason"]))
    lines += fields(facts)
    if trials:
        names = sorted({key for trial in trials for key in trial["TunedHyperParameters"]})
        minimize = goal.get("Type") != "Maximize"

        def order(trial: Mapping[str, Any]) -> tuple[int, float]:
            metric = trial.get("FinalHyperParameterTuningJobObjectiveMetric")
            if metric is None:
                return 1, 0.0
            return 0, float(metric["Value"]) if minimize else -float(metric["Value"])

        lines += ["", table(["TRIAL", "STATUS", "OBJECTIVE", *names],
                            [[t["TrainingJobName"], t["TrainingJobStatus"], _objective(t),
                              *(_tuned(t["TunedHyperParameters"].get(n, "")) for n in names)]
                             for t in sorted(trials, key=order)])]
    return terminal_safe("\n".join(lines), keep_newlines=True)


def tuning_list(summaries: Sequence[Mapping[str, Any]]) -> str:
    def trials(summary: Mapping[str, Any]) -> str:
        counts = summary["TrainingJobStatusCounters"]
        return f"{sum(counts.values())} ({counts['Completed']} completed)"

    return table(["NAME", "STATUS", "STRATEGY", "TRIALS", "CREATED"],
                 [[s["HyperParameterTuningJobName"], s["HyperParameterTuningJobStatus"], s["Strategy"], trials(s),
                   clock(s["CreationTime"], date=True)] for s in summaries])
