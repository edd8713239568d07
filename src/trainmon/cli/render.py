"""Human-readable views for the CLI (plain text; JSON output lives in the CLI itself)."""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from ..cloudwatch.statistics import PeriodRow
from ..parsing.extract import DefinitionStats
from ..store import JobRow


def clock(epoch_s: float | None, *, date: bool = False) -> str:
    if epoch_s is None:
        return "-"
    moment = datetime.fromtimestamp(epoch_s, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC" if date else "%H:%M:%S.%f")[: None if date else -3]


def number(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.6g}"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], indent: str = "  ") -> str:
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in cells]
    return "\n".join(lines)


def describe(doc: dict[str, Any], summaries: dict[str, tuple[int, float | None, float | None]],
             stats: list[DefinitionStats], command: list[str] | None) -> str:
    lines = [f"Training job {doc['TrainingJobName']}: {doc['TrainingJobStatus']} ({doc['SecondaryStatus']})"]
    lines.append(f"  ARN            {doc['TrainingJobArn']}")
    lines.append(f"  Created        {clock(doc['CreationTime'], date=True)}")
    if doc.get("TrainingTimeInSeconds"):
        lines.append(f"  Training time  {doc['TrainingTimeInSeconds']} s (billable {doc['BillableTimeInSeconds']} s)")
    if command:
        lines.append(f"  Command        {shlex.join(command)}")
    resources = doc["ResourceConfig"]
    lines.append(f"  Hosts          {resources['InstanceCount']} x {resources['InstanceType']}")
    if doc.get("HyperParameters"):
        lines.append("  Hyperparameters " + ", ".join(f"{k}={v}" for k, v in doc["HyperParameters"].items()))
    for channel in doc.get("InputDataConfig", []):
        lines.append(f"  Channel        {channel['ChannelName']}: {channel['DataSource']['S3DataSource']['S3Uri']}")
    if doc["TrainingJobStatus"] in ("Completed", "Stopped"):
        lines.append(f"  Model          {doc['ModelArtifacts']['S3ModelArtifacts']}")
    if doc.get("FailureReason"):
        lines.append("")
        lines.append("Failure reason")
        lines.extend("  " + line for line in doc["FailureReason"].splitlines())

    lines.append("")
    lines.append("Status transitions")
    lines.append(table(
        ["STATUS", "START", "SECONDS", "MESSAGE"],
        [
            [t["Status"], clock(t["StartTime"]),
             f"{t['EndTime'] - t['StartTime']:.1f}" if t.get("EndTime") is not None else "...",
             t.get("StatusMessage", "")]
            for t in doc.get("SecondaryStatusTransitions", [])
        ],
    ))

    finals = {m["MetricName"]: m for m in doc.get("FinalMetricDataList", [])}
    lines.append("")
    lines.append("Final metrics")
    if summaries:
        rows = []
        for name in sorted(summaries):
            count, low, high = summaries[name]
            final = finals.get(name)
            rows.append([name, number(final["Value"]) if final else "-", clock(final["Timestamp"]) if final else "-",
                         count, number(low), number(high)])
        lines.append(table(["METRIC", "FINAL", "AT", "POINTS", "MIN", "MAX"], rows))
    else:
        lines.append("  (none yet)")
    if stats:
        lines.append("")
        lines.append("Metric definitions")
        lines.extend(definition_report(stats, doc["AlgorithmSpecification"].get("MetricDefinitions", [])))
    return "\n".join(lines)


def definition_report(stats: list[DefinitionStats], definitions: list[dict[str, str]]) -> list[str]:
    """Per definition: matches, rejected captures and why, and near misses when nothing matched."""
    regexes = {d["Name"]: d["Regex"] for d in definitions}
    lines = []
    for s in stats:
        parts = [f"{s.matches} point{'s' if s.matches != 1 else ''}"]
        if s.nonfinite:
            parts.append(f"{s.nonfinite} NaN/infinite (kept, left out of statistics)")
        if s.rejected_total:
            why = "; ".join(f"{count} {reason}" for reason, count in sorted(s.rejected.items()))
            parts.append(f"{s.rejected_total} rejected ({why})")
        lines.append(f"  {s.name}: " + ", ".join(parts))
        if s.rejected_examples:
            lines.append("      rejected, e.g.: " + " | ".join(repr(e) for e in s.rejected_examples))
        if s.matches == 0:
            regex = regexes.get(s.name, "")
            if s.unmatched_examples:
                lines.append(f"      regex {regex!r} did not match records holding {s.literal!r}, e.g.:")
                lines.extend(f"        {e!r}" for e in s.unmatched_examples)
            elif s.literal:
                lines.append(f"      no record contains {s.literal!r}: check the spelling in regex {regex!r}")
            else:
                lines.append(f"      no record matched regex {regex!r}")
    return lines


def periods(rows: list[PeriodRow]) -> str:
    return table(
        ["METRIC", "PERIOD START", "COUNT", "AVERAGE", "MIN", "MAX", "LAST"],
        [[r.name, clock(r.start_ms / 1000), r.count, number(r.average), number(r.minimum), number(r.maximum),
          number(r.last)] for r in rows],
    )


def job_list(rows: list[JobRow]) -> str:
    def duration(row: JobRow) -> str:
        start = row.doc.get("TrainingStartTime")
        end = row.doc.get("TrainingEndTime") or row.last_modified_time
        return f"{end - start:.0f} s" if start else "-"

    return table(
        ["NAME", "STATUS", "SECONDARY", "CREATED", "DURATION"],
        [[r.name, r.status, r.doc.get("SecondaryStatus", ""), clock(r.creation_time, date=True), duration(r)]
         for r in rows],
    )
