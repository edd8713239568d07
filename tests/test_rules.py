"""Rules that watch a job (trainmon.rules, runtime/watch/rulewatch.py): each rule's evaluation on hand-built
series, configurations read and refused, and real jobs that make each rule fire, or must not."""

from __future__ import annotations

import json
import math
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

import trainmon
from trainmon.api.training_request import job_document
from trainmon.clock import ManualClock
from trainmon.errors import ValidationException
from trainmon.jobs import rulestatus
from trainmon.jobs.status import description
from trainmon.rules import ActionList, Notify, Rule, StopTraining, catalog, rule_configs
from trainmon.rules.metric import (
    ExplodingTensor,
    LossNotDecreasing,
    Overfit,
    Overtraining,
    Record,
    StalledTraining,
)
from trainmon.runtime.watch import notify
from trainmon.runtime.watch.rulewatch import RuleWatcher
from trainmon.store import Batch, Store

from .conftest import PY, ServerProcess, run_cli

Script = Callable[[str], Path]
JOB_TIMEOUT_S = 120


def series(rule: Any, values: list[dict[str, float]]) -> list[Any]:
    """Feed records (one dict of metric values each, a second apart) and return every finding."""
    return [finding for i, record in enumerate(values) for finding in rule.observe(Record(float(i), record))]


def losses(*values: float, name: str = "train:loss") -> list[dict[str, float]]:
    return [{name: value} for value in values]


# -- LossNotDecreasing ----------------------------------------------------------------------


def test_loss_not_decreasing_fires_on_a_plateau_at_its_default_num_steps() -> None:
    found = series(LossNotDecreasing("train:loss"), losses(*[1.0] * 30))
    assert len(found) == 1  # reported when it starts, not at every later check
    assert found[0].step == 11 and found[0].metric == "train:loss"  # the first check: step 1 against step 11
    assert found[0].thresholds == {"num_steps": 10, "diff_percent": 0.1, "increase_threshold_percent": 5.0}
    assert found[0].values["decrease_percent"] == 0.0
    assert "did not decrease by 0.1% in 10 steps" in found[0].message


def test_loss_not_decreasing_stays_quiet_while_the_loss_falls() -> None:
    assert series(LossNotDecreasing("train:loss"), losses(*[1 / (1 + i) for i in range(200)])) == []


def test_loss_not_decreasing_diff_percent_is_the_least_fall_per_check() -> None:
    falling_slowly = [1.0 * 0.9999 ** i for i in range(40)]  # 0.1% per 10 steps is about 0.9999 per step
    assert series(LossNotDecreasing("train:loss"), losses(*falling_slowly))  # 0.0999...% < 0.1%
    assert series(LossNotDecreasing("train:loss", diff_percent=0.05), losses(*falling_slowly)) == []


def test_loss_not_decreasing_fires_when_the_loss_rises_above_its_lowest() -> None:
    values = [1.0 - 0.05 * i for i in range(10)] + [0.56] * 5 + [0.6] * 10  # lowest 0.55, then 9% above it
    found = series(LossNotDecreasing("train:loss", num_steps=5, diff_percent=0.0), losses(*values))
    assert [f.step for f in found] == [16]
    assert "above its lowest value 0.55" in found[0].message and found[0].values["increase_percent"] > 5


def test_loss_not_decreasing_fires_again_after_the_loss_fell_again() -> None:
    values = [1.0] * 11 + [0.5] * 10 + [0.5] * 10
    found = series(LossNotDecreasing("train:loss"), losses(*values))
    assert [f.step for f in found] == [11, 31]  # fired, cleared at 21 (it fell), fired again


def test_loss_not_decreasing_counts_steps_by_the_step_metric_when_given() -> None:
    records = [{"step": float(100 * i), "train:loss": 1.0} for i in range(5)]
    found = series(LossNotDecreasing("train:loss", num_steps=200, step_metric="step"), records)
    assert [f.step for f in found] == [200]


def test_loss_not_decreasing_skips_non_finite_losses() -> None:
    values = [1.0 - 0.01 * i if i % 3 else math.nan for i in range(40)]
    assert series(LossNotDecreasing("train:loss", num_steps=3), losses(*values)) == []


# -- Overfit ----------------------------------------------------------------------------------


def _epochs(train: list[float], validation: list[float | None]) -> list[dict[str, float]]:
    records = []
    for t, v in zip(train, validation, strict=True):
        records.append({"train:loss": t})
        if v is not None:
            records.append({"validation:loss": v})
    return records


def test_overfit_fires_when_validation_is_ratio_threshold_above_training() -> None:
    found = series(Overfit("train:loss", "validation:loss"), _epochs([1.0, 0.8, 0.6], [1.05, 0.87, 0.7]))
    assert [f.step for f in found] == [3]  # 0.7 vs 0.6: 16.7% > 10%; 0.87 vs 0.8: 8.75%, not yet
    assert found[0].values["ratio"] == pytest.approx(1 / 6)
    assert found[0].thresholds == {"ratio_threshold": 0.1, "patience": 1, "start_step": 0}


def test_overfit_does_not_fire_while_validation_tracks_training() -> None:
    train = [1 / (1 + i) for i in range(50)]
    assert series(Overfit("train:loss", "validation:loss"), _epochs(train, [t * 1.08 for t in train])) == []


def test_overfit_compares_with_the_mean_training_loss_since_the_last_validation() -> None:
    records = losses(1.0, 0.5, 0.0) + [{"validation:loss": 0.54}]  # mean 0.5: 8% above; the last (0.0) is not used
    assert series(Overfit("train:loss", "validation:loss"), records) == []


def test_overfit_patience_and_start_step() -> None:
    train = [1.0] * 6
    validation: list[float | None] = [2.0] * 6
    assert [f.step for f in series(Overfit("train:loss", "validation:loss", patience=3), _epochs(train, validation))] \
        == [3]
    assert [f.step for f in series(Overfit("train:loss", "validation:loss", start_step=5),
                                   _epochs(train, validation))] == [5]


def test_overfit_reads_a_record_that_holds_both_losses() -> None:
    records = [{"train:loss": 1.0, "validation:loss": 1.5}]
    assert [f.step for f in series(Overfit("train:loss", "validation:loss"), records)] == [1]


# -- Overtraining -----------------------------------------------------------------------------


def test_overtraining_fires_when_training_stops_improving_by_delta_for_patience_train() -> None:
    values = [1.0, 0.9, 0.8] + [0.795] * 6  # improvements of 0.005 < delta 0.01
    found = series(Overtraining("train:loss", "validation:loss"), losses(*values))
    assert [(f.step, f.metric) for f in found] == [(8, "train:loss")]  # 5 points after the best (step 3)
    assert found[0].thresholds == {"patience_train": 5, "delta": 0.01}
    assert found[0].values["best_loss"] == 0.8


def test_overtraining_fires_when_validation_stops_improving_for_patience_validation() -> None:
    train = [1.0 - 0.02 * i for i in range(12)]
    validation: list[float | None] = [1.0] + [1.0 + 0.01 * i for i in range(1, 12)]
    found = series(Overtraining("train:loss", "validation:loss"), _epochs(train, validation))
    assert [(f.step, f.metric) for f in found] == [(11, "validation:loss")]  # the 10th validation point after the best
    assert found[0].thresholds == {"patience_validation": 10, "delta": 0.01}


def test_overtraining_stays_quiet_while_both_improve() -> None:
    train = [2.0 - 0.02 * i for i in range(60)]
    assert series(Overtraining("train:loss", "validation:loss"), _epochs(train, [t + 0.1 for t in train])) == []


# -- ExplodingTensor --------------------------------------------------------------------------


def test_exploding_tensor_fires_on_nan_and_infinities_once_per_metric_until_finite() -> None:
    rule = ExplodingTensor(frozenset({"train:loss", "grad_norm"}), loss_metric="train:loss")
    records = [{"train:loss": 1.0}, {"train:loss": math.nan, "grad_norm": math.inf}, {"train:loss": math.nan},
               {"train:loss": 0.5, "other": math.nan}, {"train:loss": -math.inf}]
    found = series(rule, records)
    assert [(f.metric, f.step, f.message) for f in found] == [
        ("train:loss", 2, "train:loss is nan at step 2"), ("grad_norm", 2, "grad_norm is inf at step 2"),
        ("train:loss", 5, "train:loss is -inf at step 5")]
    assert found[0].thresholds == {"only_nan": False}


def test_exploding_tensor_only_nan_leaves_infinities_alone() -> None:
    rule = ExplodingTensor(frozenset({"loss"}), only_nan=True)
    assert [f.message for f in series(rule, losses(math.inf, -math.inf, math.nan, name="loss"))] == ["loss is nan"]


# -- StalledTrainingRule ----------------------------------------------------------------------


def test_stalled_training_fires_at_its_default_threshold_and_rearms_on_activity() -> None:
    rule = StalledTraining()
    assert rule.threshold_s == 1800
    assert rule.check(1799.9, 0.0) is None
    found = rule.check(1800.0, 0.0)
    assert found is not None and found.values == {"silent_seconds": 1800.0, "last_activity": 0.0}
    assert found.thresholds == {"threshold": 1800.0} and "for 1800.0 s (threshold 1800 s)" in found.message
    assert rule.check(5000.0, 0.0) is None  # still the same silence
    assert rule.check(5001.0, 5000.0) is None  # the host printed again
    assert rule.check(6800.0, 5000.0) is not None


# -- configurations ---------------------------------------------------------------------------

_DEFINITIONS = [{"Name": "train:loss", "Regex": r"loss=(\S+)"}, {"Name": "validation:loss", "Regex": r"val=(\S+)"}]


def _setup(rule: str, kind: str = catalog.DEBUG, names: tuple[str, ...] = ("train:loss", "validation:loss"),
           **parameters: str) -> catalog.RuleSetup:
    config = {"RuleConfigurationName": rule, "RuleEvaluatorImage": "x",
              "RuleParameters": {"rule_to_invoke": rule, **parameters}}
    return catalog.setup(config, kind, list(names), "my-job", notify.check_target)


@pytest.mark.parametrize(("rule", "defaults"), [
    ("LossNotDecreasing", {"num_steps": 10, "diff_percent": 0.1, "increase_threshold_percent": 5.0, "mode": "GLOBAL"}),
    ("Overfit", {"start_step": 0, "patience": 1, "ratio_threshold": 0.1}),
    ("Overtraining", {"patience_train": 5, "patience_validation": 10, "delta": 0.01}),
    ("ExplodingTensor", {"only_nan": False}),
    ("StalledTrainingRule", {"threshold": 1800.0, "stop_training_on_fire": False}),
])
def test_debuggers_defaults(rule: str, defaults: dict[str, Any]) -> None:
    setup = _setup(rule)
    assert setup.issues == [] and setup.evaluated
    assert {key: setup.parameters[key] for key in defaults} == defaults


@pytest.mark.parametrize(("names", "loss", "validation"), [
    (("train:loss", "validation:loss"), "train:loss", "validation:loss"),
    (("loss", "val_loss"), "loss", "val_loss"),
    (("epoch", "training_loss", "valid_loss"), "training_loss", "valid_loss"),
    (("Train_Loss", "Validation-Loss"), "Train_Loss", "Validation-Loss"),  # any case
    (("loss", "train_loss", "eval_loss"), "train_loss", "eval_loss"),  # train_loss comes before loss
])
def test_default_loss_metrics_fit_common_names(names: tuple[str, ...], loss: str, validation: str) -> None:
    setup = _setup("Overfit", names=names)
    assert (setup.parameters["loss_metric"], setup.parameters["validation_metric"]) == (loss, validation)
    assert setup.metrics == (loss, validation)


def test_steps_come_from_a_step_like_definition_unless_step_metric_names_one() -> None:
    names = ("loss", "Global_Step", "epoch")
    assert _setup("LossNotDecreasing", names=names).parameters["step_metric"] == "Global_Step"
    assert _setup("LossNotDecreasing", names=names).metrics == ("loss", "Global_Step")
    assert _setup("LossNotDecreasing", names=names, step_metric="epoch").parameters["step_metric"] == "epoch"
    assert "step_metric" not in _setup("LossNotDecreasing", names=("loss", "epoch")).parameters
    assert _setup("ExplodingTensor", names=names).parameters["step_metric"] == "Global_Step"


def test_loss_not_decreasing_mode_eval_watches_the_validation_loss() -> None:
    assert _setup("LossNotDecreasing", mode="eval").parameters["loss_metric"] == "validation:loss"


def test_exploding_tensor_watches_every_metric_or_those_tensor_regex_matches() -> None:
    assert _setup("ExplodingTensor").metrics == ("train:loss", "validation:loss")
    assert _setup("ExplodingTensor", tensor_regex="val.*").metrics == ("validation:loss",)


def _problems(request_rules: list[dict[str, Any]], kind: str = "DebugRuleConfigurations",
              definitions: list[dict[str, str]] | None = None) -> str:
    request = {"TrainingJobName": "my-job", kind: request_rules, "AlgorithmSpecification": {
        "ContainerEntrypoint": ["true"], "MetricDefinitions": _DEFINITIONS if definitions is None else definitions}}
    with pytest.raises(ValidationException) as caught:
        job_document(request, 0.0)
    return caught.value.message


def _config(rule: str, name: str | None = None, **parameters: str) -> dict[str, Any]:
    return {"RuleConfigurationName": name or rule, "RuleEvaluatorImage": "any",
            "RuleParameters": {"rule_to_invoke": rule, **parameters}}


@pytest.mark.parametrize(("config", "words"), [
    (_config("LossNotDecreasing", num_steps="ten"),
     "Value 'ten' at 'debugRuleConfigurations.1.member.ruleParameters.num_steps' failed to satisfy constraint: "
     "Member must be an integer greater than or equal to 1 (rule LossNotDecreasing, parameter num_steps)"),
    (_config("LossNotDecreasing", num_steps="0"), "ruleParameters.num_steps"),
    (_config("LossNotDecreasing", diff_percent="150"), "less than or equal to 100"),
    (_config("LossNotDecreasing", mode="TEST"), "Member must satisfy enum value set: [TRAIN, EVAL, GLOBAL]"),
    (_config("Overfit", ratio_threshold="nan"), "ruleParameters.ratio_threshold"),
    (_config("Overfit", validation_metric="val"), "Value 'val' at 'debugRuleConfigurations.1.member.ruleParameters."
     "validation_metric' failed to satisfy constraint: Member must be the name of one of the job's metric "
     "definitions: train:loss, validation:loss"),
    (_config("StalledTrainingRule", threshold="0"), "Member must be a number greater than 0"),
    (_config("StalledTrainingRule", stop_training_on_fire="yes"), "Member must be True or False"),
    (_config("ExplodingTensor", tensor_regex="("), "Member must be a regular expression"),
    (_config("ExplodingTensor", collection_names=" , "), "Member must name tensor collections"),
    (_config("LossNotDecreasing", collection_names="losses"), "LossNotDecreasing reads metrics, not tensors"),
    (_config("Overtraining", patience="3"), "Member must be a parameter of Overtraining"),
    (_config("NoSuchRule"), "Value 'NoSuchRule' at 'debugRuleConfigurations.1.member.ruleParameters.rule_to_invoke'"),
    ({"RuleConfigurationName": "x", "RuleEvaluatorImage": "any"}, "Member must name a built-in rule"),
    (_config("CPUBottleneck"), "CPUBottleneck is a profiler rule (put it in ProfilerRuleConfigurations)"),
    (_config("Overfit", notify="mailto:me@example.com"), "Member must be a notification target"),
    (_config("Overfit", training_job_name_prefix="other"), "Member must be a prefix of this job's name 'my-job'"),
    (_config("Overfit", action_json='[{\\"name\\": \\"email\\", \\"endpoint\\": \\"a@b.c\\"}]'),
     "email and SMS need Amazon SNS"),
    (_config("Overfit", action_json="not json"), "Member must be a JSON list of actions"),
    ({"RuleConfigurationName": "x" * 257, "RuleEvaluatorImage": "any", "RuleParameters": {"rule_to_invoke": "Overfit"}},
     "Member must have length less than or equal to 256"),
])
def test_bad_configurations_are_validation_errors_naming_rule_and_parameter(config: dict[str, Any], words: str) -> None:
    assert words in _problems([config])


def test_every_problem_is_listed_at_once_and_names_are_unique() -> None:
    message = _problems([_config("Overfit", patience="-1"), _config("LossNotDecreasing", "Overfit", num_steps="x")])
    assert message.startswith("3 validation errors detected")
    assert "Member must be unique among the job's DebugRuleConfigurations and ProfilerRuleConfigurations" in message


def test_at_most_twenty_rules_of_each_kind() -> None:
    configs = [_config("ExplodingTensor", f"rule-{i}") for i in range(21)]
    assert "Member must have length less than or equal to 20" in _problems(configs)


def test_a_rule_without_its_loss_metric_is_refused_with_what_to_do() -> None:
    message = _problems([_config("LossNotDecreasing")], definitions=[{"Name": "accuracy", "Regex": r"acc=(\S+)"}])
    assert "Member must name the training loss: no metric definition has a common name for it" in message
    assert "give loss_metric=<the name of a metric definition>" in message


def test_a_debugger_rule_in_the_profiler_list_is_refused() -> None:
    assert "put it in DebugRuleConfigurations" in _problems([_config("Overfit")], kind="ProfilerRuleConfigurations")


def test_rules_not_evaluated_yet_are_accepted_and_reported_as_errors() -> None:
    request = {"TrainingJobName": "my-job", "AlgorithmSpecification": {
        "ContainerEntrypoint": ["true"], "MetricDefinitions": _DEFINITIONS},
        "DebugRuleConfigurations": [_config("DeadRelu", threshold_layer="50"), _config("Overfit")],
        "ProfilerRuleConfigurations": [_config("OverallFrameworkMetrics")]}
    doc = job_document(request, 100.0)
    debug = doc["DebugRuleEvaluationStatuses"]
    assert [(s["RuleConfigurationName"], s["RuleEvaluationStatus"]) for s in debug] == [
        ("DeadRelu", "Error"), ("Overfit", "InProgress")]
    assert "tensor hook" in debug[0]["StatusDetails"] and debug[1]["LastModifiedTime"] == 100.0
    assert debug[1]["RuleEvaluationJobArn"].startswith("arn:aws:sagemaker:local:000000000000:processing-job/my-job-")
    assert "needs framework profiling" in doc["ProfilerRuleEvaluationStatuses"][0]["StatusDetails"]
    assert doc["DebugRuleConfigurations"] == request["DebugRuleConfigurations"]  # echoed as given
    assert [w.split(":")[0] for w in catalog.warnings(doc)] == ["rule DeadRelu", "rule OverallFrameworkMetrics"]


def test_a_job_without_rules_has_no_rule_statuses() -> None:
    doc = job_document({"TrainingJobName": "plain", "AlgorithmSpecification": {"ContainerEntrypoint": ["true"]}}, 0.0)
    assert "DebugRuleEvaluationStatuses" not in doc and "ProfilerRuleEvaluationStatuses" not in doc


# -- actions and the Python helpers -----------------------------------------------------------


def test_actions_stop_and_notify() -> None:
    stop = _setup("Overfit", stop_training_on_fire="True")
    assert stop.stop_training and stop.notify == ()
    sdk_form = _setup("Overfit", action_json='[{\\"name\\": \\"stoptraining\\", \\"training_job_prefix\\": \\"my-\\"}]')
    assert sdk_form.issues == [] and sdk_form.stop_training
    both = Rule.sagemaker(rule_configs.overfit(), actions=ActionList(StopTraining(), Notify("https://h.example/x")))
    read = catalog.setup(both.to_debugger_rule_config_dict(), catalog.DEBUG, ["loss", "val_loss"], "my-job")
    assert read.issues == [] and read.stop_training and read.notify == ("https://h.example/x",)
    assert _setup("Overfit", notify="exec:/bin/cat").notify == ("exec:/bin/cat",)


def test_rule_configs_and_rule_sagemaker_give_sagemakers_shapes() -> None:
    base = rule_configs.loss_not_decreasing(num_steps=20, use_losses_collection=False)
    assert base == {"DebugRuleConfiguration": {"RuleConfigurationName": "LossNotDecreasing", "RuleParameters": {
        "rule_to_invoke": "LossNotDecreasing", "num_steps": "20", "use_losses_collection": "False"}}}
    rule = Rule.sagemaker(base, name="loss-check", rule_parameters={"diff_percent": 1})
    assert rule.to_debugger_rule_config_dict() == {
        "RuleConfigurationName": "loss-check", "RuleEvaluatorImage": rule.image_uri, "RuleParameters": {
            "rule_to_invoke": "LossNotDecreasing", "num_steps": "20", "use_losses_collection": "False",
            "diff_percent": "1"}}
    for make in (rule_configs.overfit, rule_configs.overtraining, rule_configs.exploding_tensor,
                 rule_configs.stalled_training_rule):
        config = Rule.sagemaker(make()).to_debugger_rule_config_dict()
        assert catalog.setup(config, catalog.DEBUG, ["loss", "val_loss"], "j").issues == []


def test_the_sagemaker_sdks_own_rules_are_accepted() -> None:
    sdk = pytest.importorskip("sagemaker.debugger", reason="the SageMaker SDK is not installed")
    rule = sdk.Rule.sagemaker(sdk.rule_configs.loss_not_decreasing(), rule_parameters={"num_steps": "5"},
                              actions=sdk.rule_configs.ActionList(sdk.rule_configs.StopTraining()))
    rule.prepare_actions("my-job")
    config = rule.to_debugger_rule_config_dict()
    read = catalog.setup(config, catalog.DEBUG, ["train:loss"], "my-job")
    assert read.issues == [] and read.stop_training and read.parameters["num_steps"] == 5


@pytest.mark.parametrize(("option", "field", "parameters"), [
    ("Overfit", "DebugRuleConfigurations", {"rule_to_invoke": "Overfit"}),
    ("LossNotDecreasing:num_steps=20,diff_percent=1", "DebugRuleConfigurations",
     {"rule_to_invoke": "LossNotDecreasing", "num_steps": "20", "diff_percent": "1"}),
    ("check:rule_to_invoke=Overfit,notify=https://h.example/a?b=1,2", "DebugRuleConfigurations",
     {"rule_to_invoke": "Overfit", "notify": "https://h.example/a?b=1,2"}),  # a comma not followed by word=
    ("ProfilerReport", "ProfilerRuleConfigurations", {"rule_to_invoke": "ProfilerReport"}),
])
def test_the_rule_option(option: str, field: str, parameters: dict[str, str]) -> None:
    kind, config = catalog.from_option(option)
    assert kind == field and config["RuleParameters"] == parameters
    assert config["RuleConfigurationName"] == option.split(":")[0]


@pytest.mark.parametrize("option", ["", ":num_steps=3", "Overfit:patience"])
def test_bad_rule_options(option: str) -> None:
    with pytest.raises(ValueError):
        catalog.from_option(option)


# -- statuses and findings in the document ----------------------------------------------------


def _doc_with(rules: list[dict[str, Any]]) -> Any:
    return job_document({"TrainingJobName": "my-job", "DebugRuleConfigurations": rules, "AlgorithmSpecification": {
        "ContainerEntrypoint": ["true"], "MetricDefinitions": _DEFINITIONS}}, 0.0)


def test_findings_are_kept_bounded_and_the_first_names_the_status() -> None:
    doc = _doc_with([_config("ExplodingTensor")])
    for i in range(25):
        rulestatus.add_finding(doc, {"RuleConfigurationName": "ExplodingTensor", "Step": i, "Message": f"m{i}",
                                     "Values": {"value": math.nan}, "Time": float(i)}, now=float(i))
    kept = doc["RuleFindings"]["ExplodingTensor"]
    assert kept["Count"] == 25 and len(kept["Findings"]) == rulestatus.KEPT_PER_RULE
    assert [f["Step"] for f in kept["Findings"]] == [0, *range(16, 25)]
    assert kept["Findings"][0]["Values"] == {"value": "NaN"}  # JSON documents: no NaN
    status = doc["DebugRuleEvaluationStatuses"][0]
    assert status["RuleEvaluationStatus"] == "IssuesFound" and status["LastModifiedTime"] == 0.0
    assert status["StatusDetails"] == ("RuleEvaluationConditionMet: Evaluation of the rule ExplodingTensor at step 0 "
                                       "resulted in the condition being met\nm0")
    rulestatus.conclude(doc, 99.0)
    assert doc["DebugRuleEvaluationStatuses"][0]["RuleEvaluationStatus"] == "IssuesFound"


def test_a_rule_left_in_progress_by_an_ended_job_is_described_as_stopped() -> None:
    doc = _doc_with([_config("Overfit")])
    assert description(doc, [])["DebugRuleEvaluationStatuses"][0]["RuleEvaluationStatus"] == "InProgress"
    doc["TrainingJobStatus"], doc["TrainingEndTime"] = "Failed", 50.0
    described = description(doc, [])
    assert described["DebugRuleEvaluationStatuses"][0]["RuleEvaluationStatus"] == "Stopped"
    assert doc["DebugRuleEvaluationStatuses"][0]["RuleEvaluationStatus"] == "InProgress"  # the document is unchanged
    assert "RuleFindings" not in described
    rulestatus.conclude(doc, 60.0)
    assert description(doc, [])["DebugRuleEvaluationStatuses"][0]["RuleEvaluationStatus"] == "NoIssuesFound"


# -- the runner, on a real store with a manual clock ------------------------------------------


def _stored_job(store: Store, rules: list[dict[str, Any]], definitions: list[dict[str, str]]) -> Any:
    doc = job_document({"TrainingJobName": "watched", "DebugRuleConfigurations": rules, "AlgorithmSpecification": {
        "ContainerEntrypoint": ["true"], "MetricDefinitions": definitions}}, time.time(), home=store.home)
    row = store.create_job("watched", doc, time.time())
    stream = store.add_stream(row.id, "algo-1", "watched/algo-1-1", 0)
    return row, stream


def _write(store: Store, row: Any, stream: Any, seq: int, timestamp_ms: int, values: dict[str, float]) -> None:
    store.write_batch(Batch(row.id, chunks=[(stream.id, seq, 1, timestamp_ms, "record")],
                            points=[(name, timestamp_ms, value, "algo-1", stream.id, seq)
                                    for name, value in values.items()],
                            stream_stats={stream.id: (1, 6, timestamp_ms)}))


def test_the_runner_reads_many_points_a_window_at_a_time_each_once(store: Store, monkeypatch) -> None:
    """However many points a job stored since the last pass, they are read a window of time at a
    time (memory stays bounded), each record once, its points together."""
    from trainmon.runtime.watch import rulewatch

    monkeypatch.setattr(rulewatch, "WINDOW_POINTS", 40)
    definitions = [{"Name": "train_loss", "Regex": "t=(.*)"}, {"Name": "eval_loss", "Regex": "e=(.*)"}]
    row, stream = _stored_job(store, [_config("LossNotDecreasing"), _config("Overfit")], definitions)
    watcher = RuleWatcher(store, row, clock=ManualClock(wall_s=time.time()))
    seen: list[tuple[float, dict[str, float]]] = []
    monkeypatch.setattr(watcher, "_observe", lambda host, record: seen.append((record.timestamp_s, dict(record.values)))
                        or [])
    reads = []
    read = store.job_point_columns
    monkeypatch.setattr(store, "job_point_columns", lambda *args, **kwargs: reads.append(kwargs) or read(*args, **kwargs))
    expected = []
    for seq in range(1000):  # 4 records a millisecond, then a gap; every 10th record has both metrics
        stamp = 1_000 + seq // 4 + (seq // 400) * 60_000
        values = {"train_loss": seq / 1000} | ({"eval_loss": -seq / 1000} if seq % 10 == 0 else {})
        _write(store, row, stream, seq, stamp, values)
        expected.append((stamp / 1000, values))
        if seq in (130, 555):
            watcher.evaluate(store)  # passes in between: the millisecond they end at is read again, once
    watcher.evaluate(store)
    assert seen == expected
    sizes = [len(read(row.id, names=watcher.metrics, start_ms=r["start_ms"], end_ms=r["end_ms"]).stamps) for r in reads]
    assert len(sizes) > 10 and max(sizes) < 1100 / 3  # windows that adapt to what they find (never all at once)


def test_the_runner_reads_a_first_batch_of_records_read_at_different_times_from_its_earliest(store: Store) -> None:
    """The job's writer stores the reads it took together in one batch, each record with the time of
    its read: the first pass starts at the earliest of them, not at the batch's newest."""
    row, stream = _stored_job(store, [_config("ExplodingTensor")], [{"Name": "loss", "Regex": "loss=(.*)"}])
    watcher = RuleWatcher(store, row, clock=ManualClock(wall_s=time.time()))
    losses = [1.0, float("inf"), 0.5, 0.25, float("nan"), 0.2]
    store.write_batch(Batch(row.id, chunks=[(stream.id, seq, 1, 1000 + seq, f"loss={loss}") for seq, loss in enumerate(losses)],
                            points=[("loss", 1000 + seq, loss, "algo-1", stream.id, seq) for seq, loss in enumerate(losses)],
                            stream_stats={stream.id: (len(losses), 60, 1000 + len(losses) - 1)}))
    assert store.stream("watched/algo-1-1").first_event_ms == 1000  # type: ignore[union-attr]
    found = watcher.evaluate(store)
    assert [(f["Step"], f["Values"]["value"]) for f in found] == [(2, "Infinity"), (5, "NaN")]


def test_the_runner_reads_a_host_whose_output_is_stored_behind_the_others(store: Store) -> None:
    """Each host's output is stored by its own writer, in its own time order; one that lags (a
    flood in its spool) stores points older than another host's already read: the rules read them,
    each once, and a host with nothing new is not read at all."""
    row, first = _stored_job(store, [_config("ExplodingTensor")], [{"Name": "loss", "Regex": "loss=(.*)"}])
    second = store.add_stream(row.id, "algo-2", "watched/algo-2-1", 0)
    watcher = RuleWatcher(store, row, clock=ManualClock(wall_s=time.time()))

    def write(stream: Any, host: str, seq: int, stamp: int, loss: float) -> None:
        store.write_batch(Batch(row.id, chunks=[(stream.id, seq, 1, stamp, "record")],
                                points=[("loss", stamp, loss, host, stream.id, seq)], stream_stats={stream.id: (1, 6, stamp)}))

    for seq in range(5):
        write(first, "algo-1", seq, 10_000 + seq * 1000, 1.0)
    write(second, "algo-2", 0, 9_000, 1.0)
    assert watcher.evaluate(store) == []
    write(second, "algo-2", 1, 10_500, float("nan"))  # long after algo-1's newest was read, stored late
    write(second, "algo-2", 2, 11_000, float("inf"))
    reads = []
    read = store.job_point_columns
    store.job_point_columns = lambda *args, **kwargs: reads.append(kwargs["host"]) or read(*args, **kwargs)  # type: ignore[method-assign]
    found = watcher.evaluate(store)
    assert [(f["Host"], f["Values"]["value"]) for f in found] == [("algo-2", "NaN")]  # (firing until finite again)
    assert set(reads) == {"algo-2"}  # algo-1 stored nothing new
    assert watcher.evaluate(store) == []  # each point once


def test_the_runner_reads_each_point_once_and_a_records_points_together(store: Store) -> None:
    definitions = [{"Name": "train_loss", "Regex": "t=(.*)"}, {"Name": "eval_loss", "Regex": "e=(.*)"}]
    row, stream = _stored_job(store, [_config("LossNotDecreasing", num_steps="1"), _config("Overfit")], definitions)
    watcher = RuleWatcher(store, row, clock=ManualClock(wall_s=time.time()))
    _write(store, row, stream, 0, 1000, {"train_loss": 1.0})
    assert watcher.evaluate(store) == []
    _write(store, row, stream, 1, 1000, {"train_loss": 0.5})  # the same millisecond as the point already read
    assert watcher.evaluate(store) == []  # step 2 fell from 1.0: nothing (the point at 1000 was not read again)
    _write(store, row, stream, 2, 2000, {"train_loss": 0.5, "eval_loss": 0.9})  # eval_loss sorts first in the record
    found = watcher.evaluate(store)
    assert sorted((f["RuleConfigurationName"], f.get("Step")) for f in found) == [("LossNotDecreasing", 3),
                                                                                   ("Overfit", 3)]
    overfit = next(f for f in found if f["RuleName"] == "Overfit")
    assert overfit["Values"]["training_loss_mean"] == pytest.approx(2 / 3)  # 1.0, 0.5 and that record's 0.5
    assert (overfit["Host"], overfit["Time"], overfit["Metric"]) == ("algo-1", 2.0, "eval_loss")


def test_the_runner_times_silence_by_its_clock(store: Store) -> None:
    row, stream = _stored_job(store, [_config("StalledTrainingRule", threshold="10")], [])
    now_ms = int(time.time() * 1000)
    clock = ManualClock(wall_s=now_ms / 1000)
    watcher = RuleWatcher(store, row, clock=clock)
    _write(store, row, stream, 0, now_ms, {})
    clock.advance(9.5)
    assert watcher.evaluate(store) == []
    clock.advance(1.0)
    found = watcher.evaluate(store)
    assert [(f["Host"], f["Values"]["silent_seconds"]) for f in found] == [("algo-1", pytest.approx(10.5))]
    assert watcher.evaluate(store) == []  # the same silence
    _write(store, row, stream, 1, now_ms + 11_000, {})
    clock.advance(5.0)
    assert watcher.evaluate(store) == []
    assert watcher.evaluate(store, check_stalls=False) == []


def test_output_read_but_not_stored_yet_is_not_silence(store: Store) -> None:
    row, stream = _stored_job(store, [_config("StalledTrainingRule", threshold="10")], [])
    now_s = time.time()
    clock = ManualClock(wall_s=now_s)
    read = {"algo-1": now_s}
    watcher = RuleWatcher(store, row, clock=clock, activity=lambda: read)  # what the supervisor read: now
    _write(store, row, stream, 0, int(now_s * 1000) - 60_000, {})  # its last stored record: a minute ago
    clock.advance(9.0)
    assert watcher.evaluate(store) == []
    clock.advance(2.0)
    assert [f["Host"] for f in watcher.evaluate(store)] == ["algo-1"]


def test_the_runner_thread_records_findings_acts_and_concludes(store: Store) -> None:
    rules = [_config("ExplodingTensor", notify="exec:/bin/true", stop_training_on_fire="True"), _config("Overfit")]
    row, stream = _stored_job(store, rules, _DEFINITIONS)
    delivered: list[tuple[str, dict[str, Any]]] = []
    stops: list[str] = []
    clock = ManualClock(wall_s=time.time())
    watcher = RuleWatcher(store, row, clock=clock, on_stop=stops.append, every_s=1.0,
                          deliver=lambda target, payload: delivered.append((target, payload)))
    clock.start(watcher)  # returns after the first pass, which found nothing
    assert watcher.passes == 1 and delivered == [] and stops == []
    _write(store, row, stream, 0, 1000, {"train:loss": math.nan})
    clock.advance(1.0)  # the next pass
    assert [target for target, _ in delivered] == ["exec:/bin/true"]
    assert delivered[0][1]["Finding"]["Message"] == "train:loss is nan at step 1"
    assert delivered[0][1]["Finding"]["Values"] == {"value": "NaN"}
    assert stops == ["rule ExplodingTensor found an issue on algo-1: train:loss is nan at step 1"]
    _write(store, row, stream, 1, 2000, {"train:loss": 1.0, "validation:loss": 3.0})
    watcher.finish()  # the last pass reads the rest, then concludes
    assert len(stops) == 1  # asked once; the last pass stops nothing
    assert [f["RuleName"] for f in watcher.findings] == ["ExplodingTensor", "Overfit"]
    stored = store.get_job("watched")
    assert stored is not None
    assert [(s["RuleConfigurationName"], s["RuleEvaluationStatus"]) for s in stored.doc["DebugRuleEvaluationStatuses"]] \
        == [("ExplodingTensor", "IssuesFound"), ("Overfit", "IssuesFound")]
    assert stored.doc["RuleFindings"]["ExplodingTensor"]["Count"] == 1


# -- real jobs ------------------------------------------------------------------------------


def _run(name: str, script: Path, *rules: str, metrics: tuple[str, ...] = (r"train:loss=loss=(\S+)",),
         extra: tuple[str, ...] = ()) -> tuple[int, dict[str, Any], str]:
    """``trainmon run`` a script with rules; (exit status, ListRuleFindings' answer, stderr)."""
    args = ["run", "--name", name, "--disable-profiler", *extra]
    for metric in metrics:
        args += ["--metric", metric]
    for rule in rules:
        args += ["--rule", rule]
    done = run_cli(*args, "--", PY, str(script), timeout=JOB_TIMEOUT_S)
    answer = trainmon.client("trainmon").list_rule_findings(TrainingJobName=name)
    return done.returncode, answer, done.stderr


def _statuses(answer: dict[str, Any]) -> dict[str, str]:
    return {rule["RuleConfigurationName"]: rule["RuleEvaluationStatus"] for rule in answer["Rules"]}


def test_a_plateauing_loss_fires_and_a_falling_one_does_not(home: Path, script: Script) -> None:
    plateau = script("""
        for step in range(40):
            print(f"step={step} loss={max(0.5, 1.0 - 0.1 * step):.3f}", flush=True)
    """)
    code, answer, _ = _run("plateau", plateau, "LossNotDecreasing")
    assert code == 0 and _statuses(answer) == {"LossNotDecreasing": "IssuesFound"}
    [finding] = answer["RuleFindings"]
    assert (finding["Host"], finding["Step"], finding["Metric"]) == ("algo-1", 21, "train:loss")
    assert finding["Values"]["previous_loss"] == finding["Values"]["loss"] == 0.5

    falling = script("""
        for step in range(60):
            print(f"step={step} loss={1 / (1 + step):.5f}", flush=True)
    """)
    code, answer, _ = _run("falling", falling, "LossNotDecreasing")
    assert code == 0 and _statuses(answer) == {"LossNotDecreasing": "NoIssuesFound"} and answer["RuleFindings"] == []


_TWO_LOSSES = (r"train:loss=train_loss=(\S+)", r"validation:loss=val_loss=(\S+)")


def test_diverging_training_and_validation_losses_fire_overfit_and_overtraining(home: Path, script: Script) -> None:
    diverging = script("""
        for epoch in range(16):
            for step in range(3):
                print(f"train_loss={2.0 - 0.05 * (3 * epoch + step):.4f}", flush=True)
            print(f"val_loss={1.5 + 0.05 * epoch:.4f}", flush=True)
    """)
    code, answer, _ = _run("diverging", diverging, "Overfit", "Overtraining", metrics=_TWO_LOSSES)
    assert code == 0 and _statuses(answer) == {"Overfit": "IssuesFound", "Overtraining": "IssuesFound"}
    overtraining = next(f for f in answer["RuleFindings"] if f["RuleName"] == "Overtraining")
    assert overtraining["Metric"] == "validation:loss" and overtraining["Thresholds"]["patience_validation"] == 10
    overfit = next(f for f in answer["RuleFindings"] if f["RuleName"] == "Overfit")
    assert overfit["Values"]["ratio"] > 0.1 and overfit["Metric"] == "validation:loss"

    tracking = script("""
        for epoch in range(16):
            for step in range(3):
                print(f"train_loss={2.0 - 0.05 * (3 * epoch + step):.4f}", flush=True)
            print(f"val_loss={(2.0 - 0.05 * (3 * epoch + 1)) * 1.05:.4f}", flush=True)
    """)
    code, answer, _ = _run("tracking", tracking, "Overfit", "Overtraining", metrics=_TWO_LOSSES)
    assert code == 0 and _statuses(answer) == {"Overfit": "NoIssuesFound", "Overtraining": "NoIssuesFound"}


def test_a_nan_loss_fires_exploding_tensor(home: Path, script: Script) -> None:
    job = script("""
        for step in range(20):
            loss = float("nan") if step == 12 else (float("inf") if step == 5 else 1 / (1 + step))
            print(f"loss={loss}", flush=True)
    """)
    code, answer, _ = _run("exploding", job, "ExplodingTensor", "nan-only:rule_to_invoke=ExplodingTensor,only_nan=True")
    assert code == 0
    assert _statuses(answer) == {"ExplodingTensor": "IssuesFound", "nan-only": "IssuesFound"}
    found = [(f["RuleConfigurationName"], f["Step"], f["Values"]["value"]) for f in answer["RuleFindings"]]
    assert found == [("ExplodingTensor", 6, "Infinity"), ("ExplodingTensor", 13, "NaN"), ("nan-only", 13, "NaN")]

    finite = script("""
        for step in range(20):
            print(f"loss={1 / (1 + step)}", flush=True)
    """)
    code, answer, _ = _run("finite", finite, "ExplodingTensor")
    assert code == 0 and _statuses(answer) == {"ExplodingTensor": "NoIssuesFound"}


def test_a_silent_job_is_stalled_and_stop_training_stops_it_naming_the_rule(home: Path, script: Script) -> None:
    silent = script("""
        import time
        print("loss=1.0", flush=True)
        time.sleep(300)  # the job hangs: nothing more is printed
    """)
    started = time.monotonic()
    code, answer, _ = _run("silent", silent, "StalledTrainingRule:threshold=2,stop_training_on_fire=True",
                           extra=("--stop-grace-seconds", "5"))
    assert time.monotonic() - started < JOB_TIMEOUT_S
    assert code == 3 and _statuses(answer) == {"StalledTrainingRule": "IssuesFound"}
    [finding] = answer["RuleFindings"]
    assert finding["Host"] == "algo-1" and finding["Actions"] == ["StopTraining"]
    assert 2.0 <= finding["Values"]["silent_seconds"] < 30
    described = trainmon.client("sagemaker").describe_training_job(TrainingJobName="silent")
    assert (described["TrainingJobStatus"], described["SecondaryStatus"]) == ("Stopped", "Stopped")
    messages = [t["StatusMessage"] for t in described["SecondaryStatusTransitions"]]
    assert messages[-2].startswith("Stopping the training job: rule StalledTrainingRule found an issue on algo-1: "
                                   "no new log record or metric point for ")
    assert messages[-1].startswith("Training job stopped by a StopTraining action: rule StalledTrainingRule")
    assert described["DebugRuleEvaluationStatuses"][0]["StatusDetails"].startswith(
        "RuleEvaluationConditionMet: Evaluation of the rule StalledTrainingRule resulted in the condition being met")

    talking = script("""
        import time
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            print("loss=1.0", flush=True)
            time.sleep(0.1)
    """)  # a threshold well above any pause a busy machine puts between two of its lines
    code, answer, _ = _run("talking", talking, "StalledTrainingRule:threshold=6,stop_training_on_fire=True")
    assert code == 0 and _statuses(answer) == {"StalledTrainingRule": "NoIssuesFound"}


def test_stop_training_through_the_python_client(home: Path, script: Script) -> None:
    endless = script("""
        import time
        for step in range(100_000):
            print(f"loss={max(0.5, 1 - 0.1 * step)}", flush=True)
            time.sleep(0.02)
    """)
    sm = trainmon.client("sagemaker")
    rule = Rule.sagemaker(rule_configs.loss_not_decreasing(num_steps=5), name="plateau", actions=StopTraining())
    sm.create_training_job(TrainingJobName="endless", AlgorithmSpecification={
        "TrainingInputMode": "File", "ContainerEntrypoint": [PY, str(endless)],
        "MetricDefinitions": [{"Name": "train:loss", "Regex": r"loss=(\S+)"}]},
        DebugRuleConfigurations=[rule.to_debugger_rule_config_dict()], ProfilerConfig={"DisableProfiler": True},
        TrainmonConfig={"StopGraceSeconds": 5})
    described = _wait_for_end(sm, "endless")
    assert described["TrainingJobStatus"] == "Stopped"
    assert "rule plateau (LossNotDecreasing) found an issue on algo-1: train:loss did not decrease" in \
        described["SecondaryStatusTransitions"][-1]["StatusMessage"]
    assert described["DebugRuleEvaluationStatuses"][0]["RuleEvaluationStatus"] == "IssuesFound"


def _wait_for_end(sm: Any, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        described: dict[str, Any] = sm.describe_training_job(TrainingJobName=name)
        if described["TrainingJobStatus"] in ("Completed", "Failed", "Stopped"):
            return described
        time.sleep(0.1)
    raise AssertionError(f"job {name} did not end within {JOB_TIMEOUT_S} s")


class _Hook(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _HookHandler)
        self.bodies: list[bytes] = []


class _HookHandler(BaseHTTPRequestHandler):
    server: _Hook

    def do_POST(self) -> None:
        self.server.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[_Hook]:
    server = _Hook()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_notifications_reach_a_command_and_a_url_with_the_finding(home: Path, script: Script, tmp_path: Path,
                                                                  hook: _Hook) -> None:
    job = script("""
        for step in range(30):
            print(f"loss={1.0 if step > 3 else 2.0 - step * 0.25}", flush=True)
    """)
    received = tmp_path / "finding.json"
    copier = f"import sys; open({str(received)!r}, 'wb').write(sys.stdin.buffer.read())"
    command = f"exec:{shlex.quote(sys.executable)} -c {shlex.quote(copier)}"
    url = f"http://127.0.0.1:{hook.server_address[1]}/findings"
    code, answer, _ = _run("notified", job, f"LossNotDecreasing:num_steps=5,notify={command}",
                           f"to-url:rule_to_invoke=LossNotDecreasing,num_steps=5,notify={url}")
    assert code == 0
    payload = json.loads(received.read_bytes())  # delivered before the job's supervisor ended
    assert (payload["TrainingJobName"], payload["RuleConfigurationName"]) == ("notified", "LossNotDecreasing")
    assert payload["RuleEvaluationStatus"] == "IssuesFound"
    finding = payload["Finding"]
    assert (finding["Host"], finding["Step"], finding["Metric"]) == ("algo-1", 11, "train:loss")
    assert finding["Thresholds"]["diff_percent"] == 0.1 and finding["Actions"] == [f"Notify {command}"]
    assert finding == {**answer["RuleFindings"][0], "Time": finding["Time"]}
    [posted] = [json.loads(body) for body in hook.bodies]
    assert posted["RuleConfigurationName"] == "to-url" and posted["Finding"]["Step"] == 11


def test_the_cli_shows_rules_and_refuses_bad_ones(home: Path, script: Script) -> None:
    job = script("""
        for step in range(25):
            print(f"loss={0.5}", flush=True)
    """)
    code, _, stderr = _run("shown", job, "LossNotDecreasing", "DeadRelu")
    assert code == 0
    assert "warning: rule DeadRelu: DeadRelu is a Debugger rule on tensors" in stderr
    described = run_cli("describe", "shown", check=True).stdout
    assert "\nRules\n" in described and "LossNotDecreasing  IssuesFound  train:loss did not decrease" in described
    assert "DeadRelu           Error" in described
    listed = run_cli("rules", "shown", check=True).stdout
    assert "LossNotDecreasing  Debug  IssuesFound  1" in listed and "num_steps=10" in listed
    assert "algo-1  LossNotDecreasing  11    train:loss did not decrease by 0.1% in 10 steps" in listed
    only = json.loads(run_cli("rules", "shown", "--rule", "DeadRelu", "--json", check=True).stdout)
    assert [r["RuleEvaluationStatus"] for r in only["Rules"]] == ["Error"] and only["RuleFindings"] == []
    missing = run_cli("rules", "shown", "--rule", "nope")
    assert missing.returncode == 2 and "has no rule configuration 'nope'" in missing.stderr

    refused = run_cli("run", "--name", "refused", "--metric", r"loss=loss=(\S+)", "--rule",
                      "LossNotDecreasing:num_steps=ten", "--", PY, str(job))
    assert refused.returncode == 2
    assert "'debugRuleConfigurations.1.member.ruleParameters.num_steps'" in refused.stderr
    assert "(rule LossNotDecreasing, parameter num_steps)" in refused.stderr
    unknown = run_cli("run", "--name", "refused", "--rule", "Bogus", "--", PY, str(job))
    assert unknown.returncode == 2 and "Value 'Bogus' at" in unknown.stderr
    assert trainmon.client("sagemaker").list_training_jobs(NameContains="refused")["TrainingJobSummaries"] == []


def test_the_estimator_takes_rules(home: Path, script: Script, tmp_path: Path) -> None:
    job = script("""
        for step in range(12):
            print(f"loss={'nan' if step == 7 else 1 / (1 + step)}", flush=True)
    """)
    estimator = trainmon.Estimator(image_uri=f"{shlex.quote(PY)} {shlex.quote(str(job))}", disable_profiler=True,
                                   metric_definitions=[{"Name": "loss", "Regex": r"loss=(\S+)"}],
                                   rules=[Rule.sagemaker(rule_configs.exploding_tensor()),
                                          {"RuleConfigurationName": "loss-check", "RuleParameters": {
                                              "rule_to_invoke": "LossNotDecreasing", "num_steps": "3"}}])
    estimator.fit(wait=True, logs="None")
    described = estimator.latest_training_job.describe()  # type: ignore[union-attr]
    assert [(s["RuleConfigurationName"], s["RuleEvaluationStatus"]) for s in described["DebugRuleEvaluationStatuses"]] \
        == [("ExplodingTensor", "IssuesFound"), ("loss-check", "NoIssuesFound")]


def test_list_rule_findings_through_the_server(server: ServerProcess, script: Script) -> None:
    job = script("""
        print("loss=nan", flush=True)
    """)
    code, _, _ = _run("served", job, "ExplodingTensor")
    assert code == 0
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as http:
        answer = http.post("/api/trainmon/ListRuleFindings", json={"TrainingJobName": "served"}).json()
        described = http.get("/api/jobs/served").json()
    assert answer["Rules"][0]["RuleEvaluationStatus"] == "IssuesFound"
    assert answer["RuleFindings"][0]["Message"] == "train:loss is nan at step 1"
    assert described["Job"]["DebugRuleEvaluationStatuses"][0]["RuleEvaluationStatus"] == "IssuesFound"
