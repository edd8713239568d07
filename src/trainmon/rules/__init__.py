"""Rules that watch a training job, as SageMaker Debugger's built-in rules do, from the job's metrics
and its system metrics.

Pure: :mod:`.catalog` (the built-in rules, their parameters and defaults, configurations read
and checked), :mod:`.metric` (each rule's evaluation: metric values in, findings out),
:mod:`.profiler` and :mod:`.profiler_setup` (the profiler rules: profile datapoints in, findings out),
:mod:`.tensor` (the tensor rules: the reductions trainmon.debug records in, findings out) and
:mod:`.configs` (configurations from Python: ``Rule.sagemaker(rule_configs.overfit())``). The
runtime evaluates them as a job runs (:mod:`trainmon.runtime.watch.rulewatch`); see docs/rules.md.
"""

from __future__ import annotations

from .configs import ActionList, Notify, ProfilerRule, Rule, StopTraining, rule_configs

__all__ = ["ActionList", "Notify", "ProfilerRule", "Rule", "StopTraining", "rule_configs"]
