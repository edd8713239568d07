"""Rule parameters as SageMaker sends them (strings) and as trainmon reads them (pure).

A rule's parameters are strings in its configuration's ``RuleParameters``; each has a kind
(:class:`Parameter`: a whole number from a bound, a number in a range, a boolean, one of a few
words, any text that is not empty), which says what a value must be and turns the string into one,
with the default Debugger's code gives it. :data:`COMMON` are the parameters every rule takes here:
its actions, which :func:`read_actions` reads. A configuration read is a :class:`RuleSetup`, and
what is wrong with one an :class:`Issue`, worded for a ValidationException. The metric rules
(:mod:`.catalog`) and the profiler rules (:mod:`.profiler_setup`) are read with these.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

HINT = "see docs/rules.md for the rules trainmon evaluates and their parameters"


@dataclass(frozen=True)
class Parameter:
    """A rule parameter: its default (None: none), what a value must be, and how a string becomes one."""

    default: Any
    constraint: str
    parse: Callable[[str], Any]


def integer(low: int) -> Parameter:
    """A whole number, ``low`` or more."""
    def parse(text: str) -> int:
        value = int(text.strip())
        if value < low:
            raise ValueError
        return value
    return Parameter(None, f"Member must be an integer greater than or equal to {low}", parse)


def number(low: float, high: float | None = None, *, above: bool = False) -> Parameter:
    """A finite number from ``low`` (above it, with ``above``) to ``high`` if given."""
    def parse(text: str) -> float:
        value = float(text.strip())
        if not math.isfinite(value) or value < low or (above and value == low) or (high is not None and value > high):
            raise ValueError
        return value
    bound = f"greater than {low:g}" if above else f"greater than or equal to {low:g}"
    upper = f" and less than or equal to {high:g}" if high is not None else ""
    return Parameter(None, f"Member must be a number {bound}{upper}", parse)


def boolean() -> Parameter:
    """True or False, as Debugger writes them (any case), or 1 or 0."""
    def parse(text: str) -> bool:
        lowered = text.strip().lower()
        if lowered not in ("true", "false", "1", "0"):
            raise ValueError
        return lowered in ("true", "1")
    return Parameter(None, "Member must be True or False", parse)


def choice(values: Sequence[str]) -> Parameter:
    """One of ``values`` (upper case), in any case."""
    def parse(text: str) -> str:
        if text.strip().upper() not in values:
            raise ValueError
        return text.strip().upper()
    return Parameter(None, f"Member must satisfy enum value set: [{', '.join(values)}]", parse)


def nonempty() -> Parameter:
    """Any text that is not blank, without its surrounding spaces (a metric's name, a target)."""
    def parse(text: str) -> str:
        if not text.strip():
            raise ValueError
        return text.strip()
    return Parameter(None, "Member must not be empty", parse)


def with_default(parameter: Parameter, default: Any) -> Parameter:
    """``parameter`` with Debugger's ``default``."""
    return Parameter(default, parameter.constraint, parameter.parse)


COMMON: dict[str, Parameter] = {
    "stop_training_on_fire": with_default(boolean(), False),
    "training_job_name_prefix": nonempty(),
    "notify": nonempty(),
    "action_json": nonempty(),
}
"""What every rule takes here: its actions (Debugger's ``stop_training_on_fire`` and
``training_job_name_prefix``, the SDK's ``action_json``, and trainmon's ``notify``)."""


@dataclass(frozen=True)
class Issue:
    """A problem with a configuration, for a ValidationException in AWS's words: the value, where
    in the configuration (``ruleParameters.num_steps``), the constraint and what to do."""

    value: Any
    where: str
    constraint: str
    hint: str | None = None


@dataclass(frozen=True)
class RuleSetup:
    """A rule configuration read: what to evaluate, on which metrics, and what to do on a finding."""

    name: str  # RuleConfigurationName
    rule: str  # rule_to_invoke
    parameters: dict[str, Any]  # every parameter of the rule, given or default (metric names resolved)
    metrics: tuple[str, ...] = ()  # the metrics it reads
    stop_training: bool = False
    notify: tuple[str, ...] = ()
    not_evaluated: str | None = None  # why trainmon does not evaluate it (then it is not)
    issues: list[Issue] = field(default_factory=list)

    @property
    def evaluated(self) -> bool:
        return self.not_evaluated is None


def default_metric(candidates: Sequence[str], metric_names: Sequence[str]) -> str | None:
    """The first metric definition named like one of ``candidates`` (any case), in the candidates' order."""
    by_lower: dict[str, str] = {}
    for name in metric_names:
        by_lower.setdefault(name.lower(), name)
    return next((by_lower[c] for c in candidates if c in by_lower), None)


def read_actions(rule: str, parameters: dict[str, Any], job_name: str, issues: list[Issue],
                 check_target: Callable[[str], str | None]) -> tuple[bool, tuple[str, ...]]:
    """Whether the rule stops the job when it fires, and where it sends its findings."""
    stop = bool(parameters.get("stop_training_on_fire", False))
    targets = [parameters["notify"]] if "notify" in parameters else []
    prefix = parameters.get("training_job_name_prefix")
    if "action_json" in parameters:
        actions = _action_list(parameters["action_json"], rule, issues)
        for action in actions:
            kind = str(action.get("name", "")).lower()
            if kind == "stoptraining":
                stop = True
                prefix = action.get("training_job_prefix", prefix)
            elif kind == "notify" and isinstance(action.get("target"), str):
                targets.append(action["target"])
            else:
                issues.append(Issue(kind or None, "ruleParameters.action_json", "Member must list the actions "
                                    "StopTraining or notify (email and SMS need Amazon SNS, which trainmon does not "
                                    "have)", f"rule {rule}: notify=<exec:command or URL> sends the finding as JSON"))
    if isinstance(prefix, str) and not job_name.startswith(prefix):
        issues.append(Issue(prefix, "ruleParameters.training_job_name_prefix", f"Member must be a prefix of this "
                            f"job's name {job_name!r}: trainmon's rules stop only their own job", f"rule {rule}"))
    for target in targets:
        problem = check_target(target)
        if problem is not None:
            issues.append(Issue(target, "ruleParameters.notify", f"Member must be a notification target: {problem}",
                                f"rule {rule}"))
    return stop, tuple(targets)


def _action_list(text: str, rule: str, issues: list[Issue]) -> list[dict[str, Any]]:
    """The SDK's ``action_json`` (``ActionList.serialize()``: JSON with its quotes escaped, as it sends it)."""
    actions: Any = None
    for candidate in (text, text.replace('\\"', '"')):  # trainmon's plain JSON, or the SDK's escaped quotes
        try:
            actions = json.loads(candidate)
            break
        except json.JSONDecodeError:
            continue
    if isinstance(actions, dict):
        actions = [actions]
    if not isinstance(actions, list) or not all(isinstance(action, dict) for action in actions):
        issues.append(Issue(text, "ruleParameters.action_json", "Member must be a JSON list of actions "
                            '([{"name": "stoptraining"}], what the SDK\'s ActionList.serialize() gives)', f"rule {rule}"))
        return []
    return actions
