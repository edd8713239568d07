"""Rule configurations from Python, in the spirit of the SageMaker SDK's, without depending on it.

    from trainmon.rules import Rule, rule_configs, StopTraining, Notify
    rules = [Rule.sagemaker(rule_configs.loss_not_decreasing(num_steps=20)),
             Rule.sagemaker(rule_configs.stalled_training_rule(threshold=600), actions=StopTraining()),
             Rule.sagemaker(rule_configs.overfit(), actions=Notify("exec:notify-send overfit"))]
    trainmon.Estimator(..., rules=rules).fit()

Profiler rules take the SDK's form too: ``ProfilerRule.sagemaker(rule_configs.CPUBottleneck(
threshold=30))`` (``rule_configs.ProfilerReport(CPUBottleneck_cpu_threshold=80)``, ...), an entry of
``ProfilerRuleConfigurations`` through :meth:`ProfilerRule.to_profiler_rule_config_dict`.

``rule_configs.<rule>(**overrides)`` returns the base configuration the SDK's ``rule_configs``
functions return (``{"DebugRuleConfiguration": {"RuleConfigurationName", "RuleParameters"}}``),
with the overrides as rule parameters (strings, as SageMaker takes them). ``Rule.sagemaker`` wraps
one, as the SDK's does, and :meth:`Rule.to_debugger_rule_config_dict` is the entry of
CreateTrainingJob's ``DebugRuleConfigurations``. The SDK's own ``Rule`` objects and configurations
work too: they have the same shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .names import PROFILER_RULES

DEBUGGER_IMAGE = "503895931360.dkr.ecr.us-east-1.amazonaws.com/sagemaker-debugger-rules:latest"
"""The rule image SageMaker's SDK names in us-east-1: recorded in the request, never pulled."""


def _value(value: Any) -> str:
    """A rule parameter as SageMaker takes it: a string (booleans as Debugger writes them)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (list, tuple)):  # collection_names=["weights", "gradients"], as Debugger takes it
        return ",".join(map(str, value))
    return value if isinstance(value, str) else str(value)


def base_config(rule: str, **overrides: Any) -> dict[str, Any]:
    """The SDK's base configuration of a built-in rule, with ``overrides`` as its parameters."""
    parameters = {"rule_to_invoke": rule, **{key: _value(value) for key, value in overrides.items()}}
    return {"DebugRuleConfiguration": {"RuleConfigurationName": rule, "RuleParameters": parameters}}


class _RuleConfigs:
    """``rule_configs.loss_not_decreasing(**overrides)`` and the others: each rule trainmon evaluates."""

    def loss_not_decreasing(self, **overrides: Any) -> dict[str, Any]:
        return base_config("LossNotDecreasing", **overrides)

    def overfit(self, **overrides: Any) -> dict[str, Any]:
        return base_config("Overfit", **overrides)

    def overtraining(self, **overrides: Any) -> dict[str, Any]:
        return base_config("Overtraining", **overrides)

    def exploding_tensor(self, **overrides: Any) -> dict[str, Any]:
        return base_config("ExplodingTensor", **overrides)

    def stalled_training_rule(self, **overrides: Any) -> dict[str, Any]:
        return base_config("StalledTrainingRule", **overrides)

    # the rules on the tensors trainmon.debug records

    def vanishing_gradient(self, **overrides: Any) -> dict[str, Any]:
        return base_config("VanishingGradient", **overrides)

    def weight_update_ratio(self, **overrides: Any) -> dict[str, Any]:
        return base_config("WeightUpdateRatio", **overrides)

    def all_zero(self, **overrides: Any) -> dict[str, Any]:
        return base_config("AllZero", **overrides)

    def unchanged_tensor(self, **overrides: Any) -> dict[str, Any]:
        return base_config("UnchangedTensor", **overrides)

    # the profiler rules: classes in the SDK's rule_configs (smdebug_rulesconfig), named as the rules

    def ProfilerReport(self, **overrides: Any) -> ProfilerRuleConfig:
        return ProfilerRuleConfig("ProfilerReport", **overrides)

    def BatchSize(self, **overrides: Any) -> ProfilerRuleConfig:
        return ProfilerRuleConfig("BatchSize", **overrides)

    def CPUBottleneck(self, **overrides: Any) -> ProfilerRuleConfig:
        return ProfilerRuleConfig("CPUBottleneck", **overrides)

    def Dataloader(self, **overrides: Any) -> ProfilerRuleConfig:
        return ProfilerRuleConfig("Dataloader", **overrides)

    def GPUMemoryIncrease(self, **overrides: Any) -> ProfilerRuleConfig:
        return ProfilerRuleConfig("GPUMemoryIncrease", **overrides)

    def IOBottleneck(self, **overrides: Any) -> ProfilerRuleConfig:
        return ProfilerRuleConfig("IOBottleneck", **overrides)

    def LoadBalancing(self, **overrides: Any) -> ProfilerRuleConfig:
        return ProfilerRuleConfig("LoadBalancing", **overrides)

    def LowGPUUtilization(self, **overrides: Any) -> ProfilerRuleConfig:
        return ProfilerRuleConfig("LowGPUUtilization", **overrides)

    def MaxInitializationTime(self, **overrides: Any) -> ProfilerRuleConfig:
        return ProfilerRuleConfig("MaxInitializationTime", **overrides)

    def OverallSystemUsage(self, **overrides: Any) -> ProfilerRuleConfig:
        return ProfilerRuleConfig("OverallSystemUsage", **overrides)

    def StepOutlier(self, **overrides: Any) -> ProfilerRuleConfig:
        return ProfilerRuleConfig("StepOutlier", **overrides)


rule_configs = _RuleConfigs()


class Action:
    """Something a rule does when it fires, serialized as the SDK's actions are (``action_json``)."""

    def __init__(self, **parameters: str) -> None:
        self.parameters = {"name": type(self).__name__.lower(), **parameters}

    def as_dict(self) -> dict[str, str]:
        return dict(self.parameters)

    def serialize(self) -> str:
        return json.dumps([self.as_dict()])


class StopTraining(Action):
    """Stop the job the rule watches (through StopTrainingJob's path: Stopping, then Stopped)."""

    def __init__(self) -> None:
        super().__init__()


class Notify(Action):
    """Send the finding as JSON to ``target``: ``exec:<command line>`` (on its stdin) or an http(s) URL (POST)."""

    def __init__(self, target: str) -> None:
        super().__init__(target=target)


class ActionList:
    """Several actions (the SDK's ``ActionList``)."""

    def __init__(self, *actions: Action) -> None:
        if not all(isinstance(action, Action) for action in actions):
            raise TypeError("ActionList takes Action objects: StopTraining(), Notify(target)")
        self.actions = actions

    def serialize(self) -> str:
        return json.dumps([action.as_dict() for action in self.actions])


class Rule:
    """A Debugger rule for an Estimator's ``rules`` (the SDK's ``Rule``): one configuration."""

    def __init__(self, name: str, rule_parameters: Mapping[str, str], *, image_uri: str = DEBUGGER_IMAGE,
                 actions: Any = None) -> None:
        self.name = name
        self.image_uri = image_uri
        self.rule_parameters = dict(rule_parameters)
        self.actions = actions

    @classmethod
    def sagemaker(cls, base_config: Mapping[str, Any], name: str | None = None,
                  rule_parameters: Mapping[str, Any] | None = None, actions: Any = None, **_ignored: Any) -> Rule:
        """A built-in rule from its base configuration (``rule_configs.overfit()``), renamed and with more
        parameters if given; ``actions`` is an :class:`Action`, an :class:`ActionList` or the SDK's."""
        config = base_config.get("DebugRuleConfiguration", base_config)
        parameters = {**config.get("RuleParameters", {}),
                      **{key: _value(value) for key, value in (rule_parameters or {}).items()}}
        return cls(name or config["RuleConfigurationName"], parameters, actions=actions)

    def prepare_actions(self, training_job_name: str) -> None:
        """What the SDK calls before a job starts: nothing to do here (a rule stops only its own job)."""

    def to_debugger_rule_config_dict(self) -> dict[str, Any]:
        parameters = dict(self.rule_parameters)
        if self.actions is not None:
            parameters["action_json"] = self.actions.serialize()
        return {"RuleConfigurationName": self.name, "RuleEvaluatorImage": self.image_uri,
                "RuleParameters": parameters}


class ProfilerRuleConfig:
    """A profiler rule's base configuration, as the SDK's ``rule_configs.CPUBottleneck()`` is: its
    ``rule_name`` and ``rule_parameters`` (``rule_to_invoke`` and the overrides)."""

    def __init__(self, rule: str, **overrides: Any) -> None:
        self.rule_name = rule
        self.rule_parameters = {"rule_to_invoke": rule, **overrides}


class ProfilerRule:
    """A profiler rule for an Estimator's ``rules`` (the SDK's ``ProfilerRule``): one configuration."""

    def __init__(self, name: str, rule_parameters: Mapping[str, Any], *, image_uri: str = DEBUGGER_IMAGE,
                 **placement: Any) -> None:
        self.name = name
        self.image_uri = image_uri
        self.rule_parameters = {key: _value(value) for key, value in rule_parameters.items()}
        self.placement = {key: value for key, value in placement.items() if value is not None}

    @classmethod
    def sagemaker(cls, base_config: Any, name: str | None = None, container_local_output_path: str | None = None,
                  s3_output_path: str | None = None, instance_type: str | None = None,
                  volume_size_in_gb: int | None = None) -> ProfilerRule:
        """A built-in profiler rule from its base configuration (``rule_configs.ProfilerReport()``, or
        the SDK's), renamed if given; the other arguments are kept in the request, as SageMaker does."""
        return cls(name or base_config.rule_name, base_config.rule_parameters, LocalPath=container_local_output_path,
                   S3OutputPath=s3_output_path, InstanceType=instance_type, VolumeSizeInGB=volume_size_in_gb)

    def to_profiler_rule_config_dict(self) -> dict[str, Any]:
        return {"RuleConfigurationName": self.name, "RuleEvaluatorImage": self.image_uri, **self.placement,
                "RuleParameters": dict(self.rule_parameters)}


def as_request(rule: Any) -> tuple[str, dict[str, Any]]:
    """An Estimator's rule as (``DebugRuleConfigurations`` or ``ProfilerRuleConfigurations``, its entry):
    a :class:`Rule`, the SDK's ``Rule`` or ``ProfilerRule``, a base configuration or a request entry."""
    if hasattr(rule, "to_profiler_rule_config_dict"):
        return "ProfilerRuleConfigurations", dict(rule.to_profiler_rule_config_dict())
    if hasattr(rule, "to_debugger_rule_config_dict"):
        return "DebugRuleConfigurations", dict(rule.to_debugger_rule_config_dict())
    if hasattr(rule, "rule_name") and hasattr(rule, "rule_parameters"):  # a profiler rule's base configuration
        return "ProfilerRuleConfigurations", ProfilerRule.sagemaker(rule).to_profiler_rule_config_dict()
    if isinstance(rule, Mapping):
        if "DebugRuleConfiguration" in rule:
            return "DebugRuleConfigurations", Rule.sagemaker(rule).to_debugger_rule_config_dict()
        profiled = (rule.get("RuleParameters") or {}).get("rule_to_invoke") in PROFILER_RULES
        return ("ProfilerRuleConfigurations" if profiled else "DebugRuleConfigurations",
                {"RuleEvaluatorImage": DEBUGGER_IMAGE, **rule})
    raise TypeError(f"a rule must be trainmon.rules.Rule, the SageMaker SDK's Rule or a dict, not {type(rule).__name__}")
