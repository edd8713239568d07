"""A job's rule evaluations in its document (pure): statuses in DescribeTrainingJob's shape, and findings.

``DebugRuleEvaluationStatuses`` and ``ProfilerRuleEvaluationStatuses`` hold one entry per rule
configuration, as boto3 gives them: ``RuleConfigurationName``, ``RuleEvaluationJobArn``,
``RuleEvaluationStatus`` (InProgress, NoIssuesFound, IssuesFound, Error, Stopping, Stopped),
``StatusDetails`` and ``LastModifiedTime``. A rule is InProgress from the job's creation, becomes
IssuesFound at its first finding (StatusDetails in SageMaker's words,
``RuleEvaluationConditionMet: Evaluation of the rule <name> at step <n> resulted in the condition
being met``), NoIssuesFound when the job's last output is evaluated without one, and Error when it
cannot be evaluated. A job that ended while a rule was still InProgress (its supervisor died)
reports it Stopped.

Findings are trainmon's own field, ``RuleFindings`` (not in DescribeTrainingJob; ListRuleFindings
answers them): per rule configuration the number found and the first and the latest
:data:`KEPT_PER_RULE` - 1, so a document stays small whatever the job does. Values that are not
finite are kept as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (documents are JSON).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from ..plainjson import finite
from .document import ACCOUNT, REGION, JobDocument, RuleEvaluationStatus

KEPT_PER_RULE = 10
STATUSES = ("InProgress", "NoIssuesFound", "IssuesFound", "Error", "Stopping", "Stopped")
KINDS = {"DebugRuleConfigurations": "DebugRuleEvaluationStatuses",
         "ProfilerRuleConfigurations": "ProfilerRuleEvaluationStatuses"}
_OPEN = ("InProgress", "Stopping")


def evaluation_arn(job_name: str, rule_name: str) -> str:
    """The ARN SageMaker gives a rule's evaluation (a processing job): ``<job>-<rule>-<8 hex digits>``."""
    digest = hashlib.sha256(f"{job_name}\0{rule_name}".encode()).hexdigest()[:8]
    name = f"{job_name[:40]}-{rule_name[:12]}-{digest}".lower()
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:processing-job/{name}"


def initial(job_name: str, rules: Iterable[tuple[str, str | None]], now: float) -> list[RuleEvaluationStatus]:
    """The statuses of new rules, given (RuleConfigurationName, why it is not evaluated or None)."""
    statuses: list[RuleEvaluationStatus] = []
    for name, not_evaluated in rules:
        status: RuleEvaluationStatus = {"RuleConfigurationName": name, "RuleEvaluationJobArn":
                                        evaluation_arn(job_name, name), "RuleEvaluationStatus": "InProgress",
                                        "LastModifiedTime": now}
        if not_evaluated is not None:
            status["RuleEvaluationStatus"] = "Error"
            status["StatusDetails"] = f"trainmon does not evaluate this rule: {not_evaluated}; see docs/rules.md"
        statuses.append(status)
    return statuses


def all_statuses(doc: Mapping[str, Any]) -> list[RuleEvaluationStatus]:
    return [status for field in KINDS.values() for status in doc.get(field) or []]


def condition_met(name: str, step: int | None, message: str) -> str:
    """StatusDetails of a rule that found an issue: SageMaker's line, then what was found."""
    at = f" at step {step}" if step is not None else ""
    return f"RuleEvaluationConditionMet: Evaluation of the rule {name}{at} resulted in the condition being met\n{message}"


def add_finding(doc: JobDocument, finding: dict[str, Any], now: float) -> None:
    """Record a finding (``finding["RuleConfigurationName"]`` names its rule): the rule is IssuesFound."""
    name = finding["RuleConfigurationName"]
    kept = doc.setdefault("RuleFindings", {}).setdefault(name, {"Count": 0, "Findings": []})
    kept["Count"] += 1
    kept["Findings"].append(finite(finding))
    if len(kept["Findings"]) > KEPT_PER_RULE:
        del kept["Findings"][1]  # the first is kept: it is the one StatusDetails names
    for status in all_statuses(doc):
        if status["RuleConfigurationName"] == name and status["RuleEvaluationStatus"] != "IssuesFound":
            status["RuleEvaluationStatus"] = "IssuesFound"
            status["StatusDetails"] = condition_met(name, finding.get("Step"), finding["Message"])
            status["LastModifiedTime"] = now


def set_error(doc: JobDocument, name: str, details: str, now: float) -> None:
    """A rule that could not be evaluated (its evaluation raised, say)."""
    for status in all_statuses(doc):
        if status["RuleConfigurationName"] == name and status["RuleEvaluationStatus"] in _OPEN:
            status.update({"RuleEvaluationStatus": "Error", "StatusDetails": details[:1024], "LastModifiedTime": now})


def conclude(doc: JobDocument, now: float, details: Mapping[str, str] | None = None) -> None:
    """Every rule still evaluating has seen the job's whole output without a finding: NoIssuesFound
    (``details``: StatusDetails by rule, e.g. a tensor rule's "No tensors were recorded: ...")."""
    for status in all_statuses(doc):
        if status["RuleEvaluationStatus"] in _OPEN:
            status["RuleEvaluationStatus"] = "NoIssuesFound"
            status.pop("StatusDetails", None)
            if details and status["RuleConfigurationName"] in details:
                status["StatusDetails"] = details[status["RuleConfigurationName"]][:1024]
            status["LastModifiedTime"] = now


def as_described(statuses: list[RuleEvaluationStatus], job_ended: bool, ended_at: float | None
                 ) -> list[RuleEvaluationStatus]:
    """The statuses DescribeTrainingJob answers: a rule left InProgress by a job that ended is Stopped."""
    if not job_ended:
        return statuses
    answer: list[RuleEvaluationStatus] = []
    for status in statuses:
        if status["RuleEvaluationStatus"] in _OPEN:
            status = {**status, "RuleEvaluationStatus": "Stopped", "StatusDetails": "The training job ended before "
                      "the rule's evaluation did (its supervising process ended).",
                      "LastModifiedTime": max(status["LastModifiedTime"], ended_at or 0.0)}
        answer.append(status)
    return answer


