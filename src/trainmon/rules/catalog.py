"""SageMaker Debugger's built-in rules as trainmon knows them, and rule configurations checked (pure).

A rule configuration is SageMaker's (``DebugRuleConfigurations`` / ``ProfilerRuleConfigurations``
of CreateTrainingJob): a ``RuleConfigurationName``, a ``RuleEvaluatorImage`` (any: nothing is
pulled) and ``RuleParameters``, strings, with ``rule_to_invoke`` naming the rule. :func:`setup`
reads one against the job's metric definitions: every parameter parsed with Debugger's default
filled in, the metrics the rule reads resolved (``loss_metric``, ``validation_metric``: by default
the first metric definition with a common name), its actions, and the problems, worded for a
ValidationException. :func:`evaluator` makes the rule's state machine (:mod:`.metric`) for one host.

trainmon evaluates the rules in :data:`METRIC_RULES`, those in :data:`TENSOR_PARAMETERS` (on the
tensors that :mod:`trainmon.debug` records), and the profiler rules of :mod:`.profiler_setup`
(from system metrics and the profile). Debugger's other built-in rules (other tensor rules,
OverallFrameworkMetrics) are accepted, so that SageMaker code runs unchanged, and reported with the
status ``Error`` and why (:data:`NOT_EVALUATED`).

The rules' names and the request fields are in :mod:`.names`, the kinds of parameter, the actions
and :class:`RuleSetup` in :mod:`.parameters` (the profiler rules are read with them too); this
module names them again for its readers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import metric, profiler_setup, tensor
from .configs import DEBUGGER_IMAGE
from .names import (
    DEBUG,
    PROFILER,
    PROFILER_RULES,
    STEP_NAMES,
    TENSOR_RULES,
    TRAINING_LOSS_NAMES,
    VALIDATION_LOSS_NAMES,
)
from .parameters import (
    COMMON,
    HINT,
    Issue,
    Parameter,
    RuleSetup,
    boolean,
    choice,
    default_metric,
    integer,
    nonempty,
    number,
    read_actions,
    with_default,
)

__all__ = ["DEBUG", "METRIC_RULES", "MODES", "NOT_EVALUATED", "PROFILER", "PROFILER_RULES", "TENSOR_PARAMETERS",
           "TENSOR_RULES", "Issue", "RuleSetup", "evaluator", "from_option", "setup", "setups", "warnings"]

MODES = ("TRAIN", "EVAL", "GLOBAL")


# -- parameters ------------------------------------------------------------------------------


def _regex() -> Parameter:
    def parse(text: str) -> re.Pattern[str]:
        from ..parsing.engines import unsafe_reason

        try:
            compiled = re.compile(text)
        except re.error:
            raise ValueError from None
        if unsafe_reason(text):  # it runs on the job's names, on the rules' thread: in bounded time only
            raise ValueError
        return compiled
    return Parameter(None, "Member must be a regular expression (Python's re) that matches metric or tensor names, "
                     "and can be matched in bounded time (no nested repetition with lookaround or back-references)",
                     parse)


def _collections() -> Parameter:
    def parse(text: str) -> str:
        names = tensor.split_names(text)
        if not names:
            raise ValueError
        return ",".join(names)
    return Parameter(None, "Member must name tensor collections, separated by commas (weights, gradients, biases, "
                     "losses, scalars, default or the script's own)", parse)


_METRIC = nonempty()
_LOSS_METRICS = {"loss_metric": _METRIC, "step_metric": _METRIC}
_BOTH_LOSSES = {**_LOSS_METRICS, "validation_metric": _METRIC}

METRIC_RULES: dict[str, dict[str, Parameter]] = {
    "LossNotDecreasing": {
        "num_steps": with_default(integer(1), 10), "diff_percent": with_default(number(0, 100), 0.1),
        "increase_threshold_percent": with_default(number(0), 5.0), "mode": with_default(choice(MODES), "GLOBAL"),
        "use_losses_collection": with_default(boolean(), True), **_LOSS_METRICS,
    },
    "Overfit": {
        "start_step": with_default(integer(0), 0), "patience": with_default(integer(1), 1),
        "ratio_threshold": with_default(number(0), 0.1), **_BOTH_LOSSES,
    },
    "Overtraining": {
        "patience_train": with_default(integer(1), 5), "patience_validation": with_default(integer(1), 10),
        "delta": with_default(number(0), 0.01), **_BOTH_LOSSES,
    },
    "ExplodingTensor": {"only_nan": with_default(boolean(), False), "tensor_regex": _regex(),
                        "collection_names": _collections(), **_LOSS_METRICS},
    "StalledTrainingRule": {"threshold": with_default(number(0, above=True), 1800.0)},
}
"""The rules trainmon evaluates, each parameter with Debugger's default (§8 of the AWS notes) or
trainmon's own (the metrics: resolved from the job's definitions when not given)."""

_SELECTION = {"collection_names": _collections(), "tensor_regex": _regex()}
TENSOR_PARAMETERS: dict[str, dict[str, Parameter]] = {
    "VanishingGradient": {"threshold": with_default(number(0), 1e-7), **_SELECTION},
    "WeightUpdateRatio": {"num_steps": integer(1), "large_threshold": with_default(number(0), 10.0),
                          "small_threshold": with_default(number(0), 1e-8),
                          "epsilon": with_default(number(0, above=True), 1e-9), **_SELECTION},
    "AllZero": {"threshold": with_default(number(0, 100), 100.0), **_SELECTION},
    "UnchangedTensor": {"num_steps": with_default(integer(2), 3), "rtol": with_default(number(0), 1e-5),
                        "atol": with_default(number(0), 1e-8), "equal_nan": with_default(boolean(), False),
                        **_SELECTION},
}
"""The rules on the tensors a script records with trainmon.debug (:mod:`.tensor`), with Debugger's
defaults; ExplodingTensor, in METRIC_RULES, reads them too."""

NOT_EVALUATED = {
    **{rule: "a Debugger rule on tensors that trainmon does not evaluate: its tensor hook (trainmon.debug) feeds "
             f"{', '.join(tensor.RULES)}" for rule in TENSOR_RULES if rule not in tensor.RULES},
    "OverallFrameworkMetrics": "a profiler rule on framework metrics (time in forward and backward passes and "
                               "data loading): it needs framework profiling, which trainmon does not do",
}

_TENSOR_SELECTION = ("collection_names", "tensor_regex")


# -- a configuration, read --------------------------------------------------------------------


def setup(config: Mapping[str, Any], kind: str, metric_names: Sequence[str], job_name: str,
          check_target: Callable[[str], str | None] = lambda target: None) -> RuleSetup:
    """A rule configuration (already checked against its shape) read for a job whose metric
    definitions are named ``metric_names``; ``issues`` lists what is wrong (empty: nothing).
    ``check_target`` says what is wrong with a notification target (None: nothing)."""
    name = str(config.get("RuleConfigurationName", ""))
    given = {str(key): str(value) for key, value in (config.get("RuleParameters") or {}).items()}
    rule = given.get("rule_to_invoke", "")
    issues: list[Issue] = []
    if rule in PROFILER_RULES and rule not in NOT_EVALUATED:
        return profiler_setup.setup(config, kind, metric_names, job_name, check_target)
    if rule not in METRIC_RULES and rule not in TENSOR_PARAMETERS:
        return _not_evaluated(name, rule, given, kind, issues)
    if kind != DEBUG:
        issues.append(Issue(rule, "ruleParameters.rule_to_invoke", f"Member must name a profiler rule: {rule} is a "
                            "Debugger rule", f"put it in {DEBUG}"))
    specs = {**(METRIC_RULES.get(rule) or TENSOR_PARAMETERS[rule]), **COMMON}
    parameters: dict[str, Any] = {}
    for key, text in given.items():
        if key == "rule_to_invoke":
            continue
        if key not in specs:
            issues.append(_unknown_parameter(rule, key, text, specs))
            continue
        try:
            parameters[key] = specs[key].parse(text)
        except ValueError:
            issues.append(Issue(text, f"ruleParameters.{key}", specs[key].constraint, f"rule {rule}, parameter {key}"))
    for key, spec in specs.items():
        if key not in parameters and spec.default is not None:
            parameters[key] = spec.default
    metrics = _resolve_metrics(rule, parameters, given, list(metric_names), issues)
    stop, targets = read_actions(rule, parameters, job_name, issues, check_target)
    shown = {key: (value.pattern if isinstance(value, re.Pattern) else value) for key, value in parameters.items()
             if key not in ("action_json",)}
    return RuleSetup(name, rule, shown, metrics, stop, targets, None, issues)


def _not_evaluated(name: str, rule: str, given: dict[str, str], kind: str, issues: list[Issue]) -> RuleSetup:
    if not rule:
        issues.append(Issue(None, "ruleParameters.rule_to_invoke", "Member must name a built-in rule", HINT))
    elif rule not in NOT_EVALUATED:
        issues.append(Issue(rule, "ruleParameters.rule_to_invoke", "Member must name one of SageMaker Debugger's "
                            f"built-in rules; trainmon evaluates {', '.join([*METRIC_RULES, *TENSOR_PARAMETERS])} "
                            "and the profiler rules", HINT))
    elif kind == DEBUG and rule in PROFILER_RULES:
        issues.append(Issue(rule, "ruleParameters.rule_to_invoke", f"Member must name a Debugger rule: {rule} is a "
                            "profiler rule", f"put it in {PROFILER}"))
    elif kind == PROFILER and rule not in PROFILER_RULES:
        issues.append(Issue(rule, "ruleParameters.rule_to_invoke", f"Member must name a profiler rule: {rule} is a "
                            "Debugger rule", f"put it in {DEBUG}"))
    parameters = {key: value for key, value in given.items() if key != "rule_to_invoke"}
    return RuleSetup(name, rule, parameters, not_evaluated=f"{rule} is {NOT_EVALUATED.get(rule, 'unknown')}",
                     issues=issues)


def _unknown_parameter(rule: str, key: str, text: str, specs: Mapping[str, Parameter]) -> Issue:
    if key in _TENSOR_SELECTION:
        return Issue(text, f"ruleParameters.{key}", f"Member must not be given: {rule} reads metrics, not tensors",
                     f"rule {rule}: name the metric with loss_metric; {key} selects tensors for the tensor rules "
                     f"({', '.join(tensor.RULES)})")
    return Issue(text, f"ruleParameters.{key}", f"Member must be a parameter of {rule}: "
                 f"{', '.join(sorted(specs))}", f"rule {rule}; {HINT}")


def _resolve_metrics(rule: str, parameters: dict[str, Any], given: Mapping[str, str], metric_names: list[str],
                     issues: list[Issue]) -> tuple[str, ...]:
    """The metrics the rule reads (names of the job's definitions), set in ``parameters``."""
    if rule == "StalledTrainingRule" or rule in TENSOR_PARAMETERS:
        return ()
    wanted: list[tuple[str, Sequence[str], bool]] = []  # (parameter, default candidates, required)
    validation_mode = rule == "LossNotDecreasing" and parameters.get("mode") == "EVAL"
    wanted.append(("loss_metric", VALIDATION_LOSS_NAMES if validation_mode else TRAINING_LOSS_NAMES,
                   rule != "ExplodingTensor"))
    if rule in ("Overfit", "Overtraining"):
        wanted.append(("validation_metric", VALIDATION_LOSS_NAMES, True))
    for key, candidates, required in wanted:
        if key in given:
            if parameters.get(key) is not None and parameters[key] not in metric_names:
                issues.append(Issue(parameters[key], f"ruleParameters.{key}", "Member must be the name of one of the "
                                    f"job's metric definitions: {', '.join(metric_names) or 'it has none'}",
                                    f"rule {rule}, parameter {key}"))
            continue
        found = default_metric(candidates, metric_names)
        if found is not None:
            parameters[key] = found
        elif required:
            kind = "validation" if key == "validation_metric" or validation_mode else "training"
            issues.append(Issue(None, f"ruleParameters.{key}", f"Member must name the {kind} loss: no metric "
                                f"definition has a common name for it ({', '.join(candidates[:6])}, ...)",
                                f"rule {rule}: give {key}=<the name of a metric definition>"))
    if "step_metric" not in given:  # a step-like definition, when the job has one: steps as the job counts them
        found = default_metric(STEP_NAMES, metric_names)
        if found is not None and found != parameters.get("loss_metric"):
            parameters["step_metric"] = found
    step = parameters.get("step_metric")
    if step is not None and step not in metric_names and "step_metric" in given:
        issues.append(Issue(step, "ruleParameters.step_metric", "Member must be the name of one of the job's metric "
                            f"definitions: {', '.join(metric_names) or 'it has none'}", f"rule {rule}"))
    if rule == "ExplodingTensor":  # metrics by tensor_regex (none: all); the hook's tensors too (rules.tensor)
        pattern = parameters.get("tensor_regex")
        if pattern is None and "collection_names" in parameters:
            return ()
        return tuple(n for n in dict.fromkeys(metric_names) if pattern is None or pattern.fullmatch(n))
    names = [parameters.get(key) for key in ("loss_metric", "validation_metric", "step_metric")]
    return tuple(dict.fromkeys(n for n in names if isinstance(n, str)))


# -- evaluators -------------------------------------------------------------------------------


def evaluator(rule: RuleSetup) -> metric.MetricRule | metric.StalledTraining:
    """A new state machine of the rule, for one host (the setup must be a metric rule without issues)."""
    p = rule.parameters
    steps = p.get("step_metric")
    if rule.rule == "LossNotDecreasing":
        return metric.LossNotDecreasing(p["loss_metric"], num_steps=p["num_steps"], diff_percent=p["diff_percent"],
                                        increase_threshold_percent=p["increase_threshold_percent"], step_metric=steps)
    if rule.rule == "Overfit":
        return metric.Overfit(p["loss_metric"], p["validation_metric"], start_step=p["start_step"],
                              patience=p["patience"], ratio_threshold=p["ratio_threshold"], step_metric=steps)
    if rule.rule == "Overtraining":
        return metric.Overtraining(p["loss_metric"], p["validation_metric"], patience_train=p["patience_train"],
                                   patience_validation=p["patience_validation"], delta=p["delta"], step_metric=steps)
    if rule.rule == "ExplodingTensor":
        return metric.ExplodingTensor(frozenset(rule.metrics), only_nan=p["only_nan"], step_metric=steps,
                                      loss_metric=p.get("loss_metric"))
    if rule.rule == "StalledTrainingRule":
        return metric.StalledTraining(p["threshold"])
    raise ValueError(f"{rule.rule} is not evaluated by trainmon")


def setups(doc: Mapping[str, Any], check_target: Callable[[str], str | None] = lambda target: None
           ) -> list[tuple[str, RuleSetup]]:
    """Every rule configuration of a job document, read: (DEBUG or PROFILER, its setup)."""
    names = [d["Name"] for d in doc.get("AlgorithmSpecification", {}).get("MetricDefinitions", [])]
    job = str(doc.get("TrainingJobName", ""))
    return [(kind, setup(config, kind, names, job, check_target)) for kind in (DEBUG, PROFILER)
            for config in doc.get(kind) or []]


def warnings(doc: Mapping[str, Any]) -> list[str]:
    """What to tell whoever creates a job (a request, or a document) about its rules: those not evaluated."""
    return [f"rule {rule.name}: {rule.not_evaluated}; it is reported with the status Error"
            for _, rule in setups(doc) if not rule.evaluated and not rule.issues]


_OPTION_PARAMETER = re.compile(r",(?=\s*[A-Za-z_][A-Za-z0-9_]*=)")


def from_option(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME[:param=value,...]`` (``trainmon run --rule``) as (the request field, a rule configuration):
    NAME is the RuleConfigurationName, and the rule to invoke unless ``rule_to_invoke`` is given. A
    value may hold commas unless one is followed by ``word=``. ValueError says what is wrong."""
    name, _, rest = text.partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"--rule {text!r} names no rule: give NAME[:param=value,...], e.g. LossNotDecreasing:num_steps=20")
    parameters: dict[str, str] = {}
    for item in _OPTION_PARAMETER.split(rest) if rest.strip() else []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--rule {text!r}: {item!r} must look like param=value")
        parameters[key.strip()] = value
    parameters = {"rule_to_invoke": parameters.pop("rule_to_invoke", name), **parameters}
    kind = PROFILER if parameters["rule_to_invoke"] in PROFILER_RULES else DEBUG
    return kind, {"RuleConfigurationName": name, "RuleEvaluatorImage": DEBUGGER_IMAGE, "RuleParameters": parameters}
