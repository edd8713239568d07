"""The profiler rules' configurations read and checked, and their state machines made (pure).

Every parameter has the default of Debugger's code (smdebug_rulesconfig, §8 of the AWS notes),
is parsed from SageMaker's strings and checked as the metric rules' are (:mod:`.parameters`), and
every rule takes ``scan_interval_us`` (accepted; trainmon judges every datapoint as it comes) and
the actions every rule takes here. ProfilerReport runs the ten rules of :data:`REPORT_RULES`, each
with its defaults unless overridden as ``<Rule>_<parameter>`` (the rule's name in any case:
``CPUBottleneck_cpu_threshold=80``), and takes ``opt_out_telemetry`` (there is no telemetry).

StepOutlier and MaxInitializationTime read the job's steps: ``step_metric`` (a metric definition
whose value is the step), by default the first definition named like a step (:data:`.names.STEP_NAMES`),
otherwise each point of the job's training loss is a step (``loss_metric``, resolved as the metric
rules resolve it). The tensor hook's step ends (:mod:`trainmon.debug`) win over the loss's points
once they come, never over a step metric (:class:`trainmon.runtime.watch.profilewatch.ProfilerRules`).
:func:`evaluators` makes a configuration's state machines (:mod:`.profiler`) for one host, each
with where its steps come from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import profiler
from .names import DEBUG, PROFILER, STEP_NAMES, TRAINING_LOSS_NAMES
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

_PERCENT = number(0, 100)
_PATIENCE = with_default(integer(0), 1000)
_SCAN = {"scan_interval_us": with_default(integer(1), 60_000_000)}
_STEPS = {"step_metric": nonempty()}

RULES: dict[str, dict[str, Parameter]] = {
    "BatchSize": {"cpu_threshold_p95": with_default(_PERCENT, 70.0), "gpu_threshold_p95": with_default(_PERCENT, 70.0),
                  "gpu_memory_threshold_p95": with_default(_PERCENT, 70.0), "patience": _PATIENCE,
                  "window": with_default(integer(1), 500), **_SCAN},
    "CPUBottleneck": {"threshold": with_default(_PERCENT, 50.0), "gpu_threshold": with_default(_PERCENT, 10.0),
                      "cpu_threshold": with_default(_PERCENT, 90.0), "patience": _PATIENCE, **_SCAN},
    "Dataloader": {"min_threshold": with_default(number(0), 70.0), "max_threshold": with_default(number(0), 200.0),
                   "patience": with_default(integer(0), 10), **_SCAN},
    "GPUMemoryIncrease": {"increase": with_default(number(0, above=True), 5.0), "patience": _PATIENCE,
                          "window": with_default(integer(1), 10), **_SCAN},
    "IOBottleneck": {"threshold": with_default(_PERCENT, 50.0), "gpu_threshold": with_default(_PERCENT, 10.0),
                     "io_threshold": with_default(_PERCENT, 50.0), "patience": _PATIENCE, **_SCAN},
    "LoadBalancing": {"threshold": with_default(number(0), 0.5), "patience": _PATIENCE, **_SCAN},
    "LowGPUUtilization": {"threshold_p95": with_default(_PERCENT, 70.0), "threshold_p5": with_default(_PERCENT, 10.0),
                          "window": with_default(integer(1), 500), "patience": _PATIENCE, **_SCAN},
    "MaxInitializationTime": {"threshold": with_default(number(0, above=True), 20.0), **_STEPS, **_SCAN},
    "OverallSystemUsage": {**_SCAN},
    "StepOutlier": {"stddev": with_default(number(0, above=True), 3.0),
                    "mode": choice(("TRAIN", "EVAL", "PREDICT", "GLOBAL")),
                    "n_outliers": with_default(integer(0), 10), **_STEPS, **_SCAN},
}
"""The profiler rules trainmon evaluates one by one, each parameter with Debugger's code default."""

REPORT_RULES = tuple(RULES)
"""The rules ProfilerReport runs (Debugger's ten; OverallFrameworkMetrics needs framework profiling)."""

REPORT: dict[str, Parameter] = {"opt_out_telemetry": with_default(boolean(), False), **_SCAN}
"""ProfilerReport's own parameters (beside ``<Rule>_<parameter>`` overrides and the actions)."""

EVALUATED = (*REPORT_RULES, "ProfilerReport")
_STEP_RULES = ("MaxInitializationTime", "StepOutlier")
_BY_LOWER = {rule.lower(): rule for rule in REPORT_RULES}


@dataclass(frozen=True)
class StepSource:
    """Where a rule's steps come from: the value of a step metric, or (``counted``) each point of the loss."""

    metric: str
    counted: bool = False


def setup(config: Mapping[str, Any], kind: str, metric_names: Sequence[str], job_name: str,
          check_target: Callable[[str], str | None] = lambda target: None) -> RuleSetup:
    """A profiler rule's configuration read for a job whose metric definitions are ``metric_names``
    (:func:`trainmon.rules.catalog.setup` hands them here); ``issues`` lists what is wrong."""
    name = str(config.get("RuleConfigurationName", ""))
    given = {str(key): str(value) for key, value in (config.get("RuleParameters") or {}).items()}
    rule = given.get("rule_to_invoke", "")
    issues: list[Issue] = []
    if kind == DEBUG:
        issues.append(Issue(rule, "ruleParameters.rule_to_invoke", f"Member must name a Debugger rule: {rule} is a "
                            "profiler rule", f"put it in {PROFILER}"))
    specs = {**(REPORT if rule == "ProfilerReport" else RULES[rule]), **COMMON}
    parameters: dict[str, Any] = {}
    for key, text in given.items():
        if key == "rule_to_invoke":
            continue
        if key in specs:
            _parse(rule, key, key, text, specs[key], parameters, issues)
        elif rule == "ProfilerReport":
            _override(key, text, parameters, issues)
        else:
            issues.append(Issue(text, f"ruleParameters.{key}", f"Member must be a parameter of {rule}: "
                                f"{', '.join(sorted(specs))}", f"rule {rule}; {HINT}"))
    for key, spec in specs.items():
        if key not in parameters and spec.default is not None:
            parameters[key] = spec.default
    if rule == "Dataloader" and parameters["min_threshold"] > parameters["max_threshold"]:
        issues.append(Issue(given.get("min_threshold"), "ruleParameters.min_threshold", "Member must not be above "
                            f"max_threshold ({parameters['max_threshold']:g})", "rule Dataloader"))
    metrics = _resolve_steps(rule, parameters, list(metric_names), issues)
    stop, targets = read_actions(rule, parameters, job_name, issues, check_target)
    shown = {key: value for key, value in parameters.items() if key != "action_json"}
    return RuleSetup(name, rule, shown, metrics, stop, targets, None, issues)


def _parse(rule: str, key: str, shown: str, text: str, spec: Parameter, parameters: dict[str, Any],
           issues: list[Issue]) -> None:
    try:
        parameters[shown] = spec.parse(text)
    except ValueError:
        issues.append(Issue(text, f"ruleParameters.{key}", spec.constraint, f"rule {rule}, parameter {key}"))


def _override(key: str, text: str, parameters: dict[str, Any], issues: list[Issue]) -> None:
    """ProfilerReport's ``<Rule>_<parameter>``: a parameter of one of the rules it runs."""
    prefix, _, parameter = key.partition("_")
    rule = _BY_LOWER.get(prefix.lower())
    if rule is None or not parameter:
        issues.append(Issue(text, f"ruleParameters.{key}", "Member must be a parameter of ProfilerReport ("
                            f"{', '.join(sorted({*REPORT, *COMMON}))}) or <Rule>_<parameter> for a rule it runs: "
                            f"{', '.join(REPORT_RULES)}", "rule ProfilerReport, e.g. CPUBottleneck_cpu_threshold=80"))
        return
    parameter = parameter.lower()
    if parameter not in RULES[rule]:
        issues.append(Issue(text, f"ruleParameters.{key}", f"Member must be a parameter of {rule}: "
                            f"{', '.join(sorted(RULES[rule]))}", f"rule ProfilerReport, override {key}"))
        return
    _parse("ProfilerReport", key, f"{rule}_{parameter}", text, RULES[rule][parameter], parameters, issues)


def _resolve_steps(rule: str, parameters: dict[str, Any], metric_names: list[str], issues: list[Issue]
                   ) -> tuple[str, ...]:
    """The metrics the rule reads its steps from (set in ``parameters``): given step metrics checked,
    else the default (a step-like metric, or the loss metric)."""
    if rule not in (*_STEP_RULES, "ProfilerReport"):
        return ()
    keys = ["step_metric"] if rule != "ProfilerReport" else [f"{r}_step_metric" for r in _STEP_RULES]
    read: list[str] = []
    for key in keys:
        if key in parameters:
            if parameters[key] not in metric_names:
                issues.append(Issue(parameters[key], f"ruleParameters.{key}", "Member must be the name of one of the "
                                    f"job's metric definitions: {', '.join(metric_names) or 'it has none'}",
                                    f"rule {rule}, parameter {key}"))
            read.append(parameters[key])
    if rule != "ProfilerReport" and "step_metric" in parameters:
        return tuple(read)
    step = default_metric(STEP_NAMES, metric_names)
    if step is not None:
        parameters["step_metric"] = step
    else:
        loss = default_metric(TRAINING_LOSS_NAMES, metric_names)
        if loss is not None:
            parameters["loss_metric"] = loss
    default = parameters.get("step_metric", parameters.get("loss_metric"))
    return tuple(dict.fromkeys([*read, *([default] if default is not None else [])]))


# -- state machines ---------------------------------------------------------------------------


def evaluators(rule: RuleSetup, *, hook: bool = False) -> list[tuple[profiler.ProfilerRule, StepSource | None]]:
    """New state machines of a profiler rule for one host (ProfilerReport: of each rule it runs),
    each with where its steps come from (None: it reads none, or none is known). ``hook``: the
    job's rules read the tensor hook's records, so its steps are to be expected even without a
    step or loss metric (MaxInitializationTime may then fire before any step came)."""
    p = rule.parameters
    if rule.rule != "ProfilerReport":
        return [_made(rule.rule, p, _source(p), hook)]
    default = _source(p)
    made = []
    for name in REPORT_RULES:
        own = {key: spec.default for key, spec in RULES[name].items() if spec.default is not None}
        own.update({key[len(name) + 1:]: value for key, value in p.items() if key.startswith(f"{name}_")})
        made.append(_made(name, own, _source(own) or default if name in _STEP_RULES else None, hook))
    return made


def reads_hook_steps(rule: RuleSetup) -> bool:
    """Whether one of the configuration's rules would take the tensor hook's steps (a step rule
    without a step metric: the hook's steps win over the loss's points, never over a step metric)."""
    return any(isinstance(made, (profiler.StepOutlier, profiler.MaxInitializationTime))
               and (source is None or source.counted) for made, source in evaluators(rule))


def _source(p: Mapping[str, Any]) -> StepSource | None:
    if p.get("step_metric") is not None:
        return StepSource(p["step_metric"])
    if p.get("loss_metric") is not None:
        return StepSource(p["loss_metric"], counted=True)
    return None


def _made(rule: str, p: Mapping[str, Any], steps: StepSource | None, hook: bool = False
          ) -> tuple[profiler.ProfilerRule, StepSource | None]:
    made: profiler.ProfilerRule
    if rule == "CPUBottleneck":
        made = profiler.CPUBottleneck(threshold=p["threshold"], gpu_threshold=p["gpu_threshold"],
                                      cpu_threshold=p["cpu_threshold"], patience=p["patience"])
    elif rule == "IOBottleneck":
        made = profiler.IOBottleneck(threshold=p["threshold"], gpu_threshold=p["gpu_threshold"],
                                     io_threshold=p["io_threshold"], patience=p["patience"])
    elif rule == "LowGPUUtilization":
        made = profiler.LowGPUUtilization(threshold_p95=p["threshold_p95"], threshold_p5=p["threshold_p5"],
                                          window=p["window"], patience=p["patience"])
    elif rule == "GPUMemoryIncrease":
        made = profiler.GPUMemoryIncrease(increase=p["increase"], patience=p["patience"], window=p["window"])
    elif rule == "LoadBalancing":
        made = profiler.LoadBalancing(threshold=p["threshold"], patience=p["patience"])
    elif rule == "BatchSize":
        made = profiler.BatchSize(cpu_threshold_p95=p["cpu_threshold_p95"], gpu_threshold_p95=p["gpu_threshold_p95"],
                                  gpu_memory_threshold_p95=p["gpu_memory_threshold_p95"], patience=p["patience"],
                                  window=p["window"])
    elif rule == "MaxInitializationTime":
        made = profiler.MaxInitializationTime(threshold_min=p["threshold"], expects_steps=steps is not None or hook)
    elif rule == "StepOutlier":
        made = profiler.StepOutlier(stddev=p["stddev"], n_outliers=p["n_outliers"])
    elif rule == "Dataloader":
        made = profiler.Dataloader(min_threshold=p["min_threshold"], max_threshold=p["max_threshold"],
                                   patience=p["patience"])
    elif rule == "OverallSystemUsage":
        made = profiler.OverallSystemUsage()
    else:
        raise ValueError(f"{rule} is not a profiler rule trainmon evaluates")
    return made, steps if rule in _STEP_RULES else None


# -- ProfilerReport by default ----------------------------------------------------------------


def default_report(now_s: float, image: str) -> dict[str, Any]:
    """The ProfilerReport entry the SageMaker SDK adds to a job that profiles (``ProfilerReport-<epoch s>``)."""
    return {"RuleConfigurationName": f"ProfilerReport-{int(now_s)}", "RuleEvaluatorImage": image,
            "RuleParameters": {"rule_to_invoke": "ProfilerReport"}}
