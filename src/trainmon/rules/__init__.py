"""Rules that watch a training job, as SageMaker Debugger's built-in rules do, from the job's metrics.

Pure: :mod:`.catalog` (the built-in rules, their parameters and defaults, configurations read
and checked), :mod:`.metric` (each rule's evaluation: metric values in, findings out) and
:mod:`.configs` (configurations from Python: ``Rule.sagemaker(rule_configs.overfit())``). The
runtime evaluates them as a job runs (:mod:`trainmon.runtime.rulewatch`); see docs/rules.md.
"""

from __future__ import annotations

from .configs import ActionList, Notify, Rule, StopTraining, rule_configs

__all__ = ["ActionList", "Notify", "Rule", "StopTraining", "rule_configs"]
