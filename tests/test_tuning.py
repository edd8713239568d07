"""Hyperparameter tuning jobs: the request's rules in AWS's words, the search's strategies (Optuna's
samplers on a function whose optimum is known), SageMaker's median rule and the completion
criteria as plain values, and real tuning jobs: real trials (training jobs of a small script whose
loss depends on its hyperparameters in a known way), run in parallel, stopped early, stopped, ended
by a target; through the operations, the CLI, boto3 against the AWS endpoint and the SageMaker
Python SDK v2's HyperparameterTuner."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from trainmon.api import sagemaker
from trainmon.api import tuning as ops
from trainmon.clock import ManualClock
from trainmon.errors import ResourceInUse, ResourceNotFound, ValidationException
from trainmon.jobs import tuning
from trainmon.store import Store
from trainmon.tuning.space import Search
from trainmon.tuning.tuner import Tuner

from .conftest import PY, ServerProcess, run_cli, wait_for

METRIC = "validation:loss"
DEFINITIONS = [{"Name": METRIC, "Regex": "validation:loss=([-0-9.e]+);"}]


def loss(lr: float, depth: int, offset: float = 0.0) -> float:
    """The objective the trials print at their last epoch: least at lr = 0.1, depth = 6."""
    return (lr - 0.1) ** 2 * 100 + (depth - 6) ** 2 * 0.1 + offset


OBJECTIVE_SCRIPT = """\
import json, os, sys, time
hp = json.loads(os.environ["SM_HPS"])
lr, depth = float(hp.get("lr", "0.1")), int(hp.get("depth", "6"))
offset, epochs = float(hp.get("offset", "0")), int(hp.get("epochs", "4"))
final = (lr - 0.1) ** 2 * 100 + (depth - 6) ** 2 * 0.1 + offset
runs_log = os.environ.get("RUNS_LOG", os.devnull)
with open(runs_log, "a") as runs:
    runs.write(f"start {os.getpid()}\\n")
for epoch in range(1, epochs + 1):
    print(f"epoch {epoch} validation:loss={final + 1.0 / epoch - 1.0 / epochs:.6f};", flush=True)
if float(hp.get("hold_above", "inf")) < final:  # a trial that runs until it is stopped
    time.sleep(300)
with open(runs_log, "a") as runs:
    runs.write(f"end {os.getpid()}\\n")
"""


@pytest.fixture
def objective(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The trials' script; each appends its start and end to the file RUNS_LOG names."""
    path = tmp_path / "objective.py"
    path.write_text(OBJECTIVE_SCRIPT, encoding="utf-8")
    monkeypatch.setenv("RUNS_LOG", str(tmp_path / "runs.log"))
    return path


def request(script: Path | str, name: str = "tune", *, strategy: str = "Random", jobs: int | None = 4,
            parallel: int = 2, ranges: dict[str, Any] | None = None, static: dict[str, str] | None = None,
            **config: Any) -> dict[str, Any]:
    limits: dict[str, Any] = {"MaxParallelTrainingJobs": parallel}
    if jobs is not None:
        limits["MaxNumberOfTrainingJobs"] = jobs
    return {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": {
            "Strategy": strategy, "RandomSeed": 1, "ResourceLimits": limits,
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": METRIC},
            "ParameterRanges": ranges if ranges is not None else {
                "ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.001", "MaxValue": "1",
                                               "ScalingType": "Logarithmic"}],
                "IntegerParameterRanges": [{"Name": "depth", "MinValue": "1", "MaxValue": "10"}]},
            **config,
        },
        "TrainingJobDefinition": {
            "AlgorithmSpecification": {"TrainingImage": f"{PY} {script}", "TrainingInputMode": "File",
                                       "MetricDefinitions": DEFINITIONS},
            "StaticHyperParameters": static or {"epochs": "3"},
        },
    }


def finished(store: Store, name: str, timeout_s: float = 240) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob once the tuning job has ended."""
    answer: dict[str, Any] = {}

    def ended() -> bool:
        answer.update(ops.describe_hyper_parameter_tuning_job(store, HyperParameterTuningJobName=name))
        return answer["HyperParameterTuningJobStatus"] not in tuning.ACTIVE

    wait_for(ended, f"tuning job {name} to end", timeout_s, poll_s=0.2)
    return answer


def trials(store: Store, name: str, **request: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while True:
        page = ops.list_training_jobs_for_hyper_parameter_tuning_job(store, HyperParameterTuningJobName=name,
                                                                     **request)
        found += page["TrainingJobSummaries"]
        if "NextToken" not in page:
            return found
        request["NextToken"] = page["NextToken"]


def value(summary: dict[str, Any]) -> float:
    return float(summary["FinalHyperParameterTuningJobObjectiveMetric"]["Value"])


# -- the request's rules ------------------------------------------------------------------------------


def _set(path: str, given: Any) -> Callable[[dict[str, Any]], None]:
    def change(body: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for part in parents:
            body = body.setdefault(part, {})
        if given is None:
            body.pop(last, None)
        else:
            body[last] = given
    return change


@pytest.mark.parametrize(("change", "said"), [
    (_set("HyperParameterTuningJobName", "x" * 33), "Member must have length less than or equal to 32"),
    (_set("HyperParameterTuningJobConfig.Strategy", "Genetic"), "Member must satisfy enum value set"),
    (_set("HyperParameterTuningJobConfig.HyperParameterTuningJobObjective.MetricName", "loss"),
     "The objective metric 'loss' is not defined in TrainingJobDefinition.AlgorithmSpecification.MetricDefinitions"),
    (_set("HyperParameterTuningJobConfig.HyperParameterTuningJobObjective.MetricName", "validation:los"),
     "(defined: validation:loss). Did you mean 'validation:loss'?"),
    (_set("HyperParameterTuningJobConfig.ResourceLimits.MaxParallelTrainingJobs", 9),
     "MaxParallelTrainingJobs must be less than or equal to MaxNumberOfTrainingJobs"),
    (_set("HyperParameterTuningJobConfig.ResourceLimits.MaxNumberOfTrainingJobs", None),
     "ResourceLimits.MaxNumberOfTrainingJobs is required with the Random strategy"),
    (_set("HyperParameterTuningJobConfig.ResourceLimits.MaxRuntimeInSeconds", 60),
     "Member must have value greater than or equal to 120"),
    (_set("HyperParameterTuningJobConfig.ParameterRanges.IntegerParameterRanges",
          [{"Name": "depth", "MinValue": "8", "MaxValue": "2"}]),
     "The MinValue 8 of the hyperparameter 'depth' is greater than its MaxValue 2"),
    (_set("HyperParameterTuningJobConfig.ParameterRanges.IntegerParameterRanges",
          [{"Name": "depth", "MinValue": "one", "MaxValue": "2"}]),
     "The MinValue 'one' of the hyperparameter 'depth' is not an integer"),
    (_set("HyperParameterTuningJobConfig.ParameterRanges.ContinuousParameterRanges",
          [{"Name": "lr", "MinValue": "0", "MaxValue": "1", "ScalingType": "Logarithmic"}]),
     "'lr' is scaled logarithmically, so its range must be greater than 0"),
    (_set("HyperParameterTuningJobConfig.ParameterRanges.ContinuousParameterRanges",
          [{"Name": "lr", "MinValue": "0.5", "MaxValue": "1", "ScalingType": "ReverseLogarithmic"}]),
     "must be at least 0 and less than 1"),
    (_set("HyperParameterTuningJobConfig.ParameterRanges.IntegerParameterRanges",
          [{"Name": "depth", "MinValue": "1", "MaxValue": "9", "ScalingType": "ReverseLogarithmic"}]),
     "ReverseLogarithmic scaling is only supported for continuous hyperparameters"),
    (_set("HyperParameterTuningJobConfig.ParameterRanges", {}), "searches no hyperparameter"),
    (_set("HyperParameterTuningJobConfig.Strategy", "Grid"), "MaxNumberOfTrainingJobs must not be given with the "
     "Grid strategy"),
    (_set("HyperParameterTuningJobConfig.TrainingJobEarlyStoppingType", "Bogus"), "Member must satisfy enum value"),
    (_set("HyperParameterTuningJobConfig.StrategyConfig", {"HyperbandStrategyConfig": {"MinResource": 1}}),
     "StrategyConfig is only supported with the Hyperband strategy"),
    (_set("HyperParameterTuningJobConfig.TuningJobCompletionCriteria",
          {"BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving": 2}}),
     "Member must have value greater than or equal to 3"),
    (_set("TrainingJobDefinition.StaticHyperParameters", {"lr": "0.1"}),
     "Hyperparameters lr are both static and tunable in TrainingJobDefinition"),
    (_set("TrainingJobDefinitions", [{"AlgorithmSpecification": {}}]),
     "Exactly one of TrainingJobDefinition or TrainingJobDefinitions must be provided"),
    (_set("TrainingJobDefinition.InputDataConfig", [{"ChannelName": "train", "DataSource": {
        "S3DataSource": {"S3Uri": "/no/such/dir", "S3DataType": "S3Prefix"}}}]),
     "TrainingJobDefinition: Channel 'train': /no/such/dir does not exist."),
    (_set("TrainingJobDefinition.StoppingCondition", {"MaxRuntimeInSeconds": 0}),
     "TrainingJobDefinition: 1 validation error detected"),
    (_set("Surprise", 1), "Surprise"),
])
def test_a_bad_request_is_refused_in_aws_words_and_nothing_is_stored(
        store: Store, objective: Path, change: Callable[[dict[str, Any]], None], said: str) -> None:
    body = request(objective)
    change(body)
    with pytest.raises(ValidationException) as refused:
        ops.create_hyper_parameter_tuning_job(store, **body)
    assert said in refused.value.message
    assert ops.list_hyper_parameter_tuning_jobs(store)["HyperParameterTuningJobSummaries"] == []
    assert store.list_jobs() == []


def test_hyperband_takes_no_other_early_stopping_and_grid_only_categories(store: Store, objective: Path) -> None:
    body = request(objective, strategy="Hyperband", TrainingJobEarlyStoppingType="Auto")
    with pytest.raises(ValidationException, match="must be Off with the Hyperband strategy"):
        ops.create_hyper_parameter_tuning_job(store, **body)
    body = request(objective, strategy="Grid", jobs=None)
    with pytest.raises(ValidationException, match="The Grid strategy supports only CategoricalParameterRanges"):
        ops.create_hyper_parameter_tuning_job(store, **body)


def test_missing_and_busy_tuning_jobs_answer_as_sagemaker_does(store: Store) -> None:
    for operation in (ops.describe_hyper_parameter_tuning_job, ops.stop_hyper_parameter_tuning_job,
                      ops.delete_hyper_parameter_tuning_job,
                      ops.list_training_jobs_for_hyper_parameter_tuning_job):
        with pytest.raises(ResourceNotFound, match="can't find a tuning job with name nothing"):
            operation(store, HyperParameterTuningJobName="nothing")
    with pytest.raises(ValidationException, match="maxResults"):
        ops.list_hyper_parameter_tuning_jobs(store, MaxResults=0)


# -- decisions as plain values ------------------------------------------------------------------------


def test_the_median_rule_stops_a_trial_worse_than_the_median_of_running_averages() -> None:
    done = [[4.0, 2.0, 1.0], [5.0, 3.0, 2.0], [6.0, 4.0, 3.0]]  # running averages at step 2: 3, 4, 5 -> median 4
    assert tuning.worse_than_median([9.0, 4.5], done, minimize=True)
    assert not tuning.worse_than_median([9.0, 3.5], done, minimize=True)
    assert not tuning.worse_than_median([9.0, 4.5], done[:2], minimize=True)  # fewer than 3 to judge by
    assert not tuning.worse_than_median([9.0, 9.0, 1.0, 9.0], done, minimize=True)  # judged at step 3, the last
    assert tuning.worse_than_median([9.0, 9.0, 9.0, 1.0], done, minimize=True)  # that three ended trials reached
    assert tuning.worse_than_median([9.0, 3.5], done, minimize=False)  # maximising: less is worse
    assert not tuning.worse_than_median([], done, minimize=True)


def test_completion_criteria() -> None:
    config: dict[str, Any] = {"HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": METRIC}}
    assert tuning.completion(config, [3.0, None, 2.0]) == (None, 0, False)
    config["TuningJobCompletionCriteria"] = {"TargetObjectiveMetricValue": 1.5}
    assert tuning.completion(config, [3.0, 2.0])[0] is None
    assert tuning.completion(config, [3.0, 1.5])[0] == "TargetObjectiveMetricValue"
    config["TuningJobCompletionCriteria"] = {"BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving": 3}}
    assert tuning.completion(config, [1.0, 2.0, 2.0]) == (None, 2, False)
    assert tuning.completion(config, [1.0, 2.0, None, 2.0, 3.0]) == ("BestObjectiveNotImproving", 3, False)
    flat = [5.0, 4.0, 3.0, 2.0, 1.0] + [1.0 + i / 1000 for i in range(10)]
    config["TuningJobCompletionCriteria"] = {"ConvergenceDetected": {"CompleteOnConvergence": "Enabled"}}
    assert tuning.completion(config, flat)[2] and tuning.completion(config, flat)[0] == "ConvergenceDetected"
    improving = [float(20 - i) for i in range(15)]
    assert tuning.completion(config, improving) == (None, 0, False)


def test_counters_and_the_best_trial() -> None:
    jobs, goals = tuning.counters(["Completed", "Stopped", "Failed", "InProgress", "Stopping", "Completed"],
                                  [1.0, 2.0, None, None, 0.5, None])
    assert jobs == {"Completed": 2, "InProgress": 2, "RetryableError": 0, "NonRetryableError": 1, "Stopped": 1}
    assert goals == {"Succeeded": 2, "Pending": 2, "Failed": 2}
    assert tuning.best_index([None, 3.0, 1.0, 1.0], minimize=True) == 2
    assert tuning.best_index([None, 3.0, 1.0], minimize=False) == 1
    assert tuning.best_index([None], minimize=True) is None


# -- the search ---------------------------------------------------------------------------------------


def _search(strategy: str, seed: int, jobs: int = 40, **ranges: Any) -> Search:
    body = request("train.py", strategy=strategy, jobs=None if strategy == "Grid" else jobs, parallel=1,
                   ranges=ranges or None)
    body["HyperParameterTuningJobConfig"]["RandomSeed"] = seed
    return Search(tuning.tuning_document(body, 0.0))


def _trials_to_reach(strategy: str, seed: int, good: float = 0.06, limit: int = 50) -> int:
    """How many trials the search takes to find lr within about 0.02 of 0.1 with depth 6."""
    search = _search(strategy, seed, limit)
    for number in range(1, limit + 1):
        trial, _, tuned = search.ask()
        found = loss(float(tuned["lr"]), int(tuned["depth"]))
        search.tell(trial, found, stopped_early=False)
        if found < good:
            return number
    return limit + 1


def test_bayesian_reaches_the_optimum_in_fewer_trials_than_random_on_the_same_seeds() -> None:
    seeds = range(8)
    bayesian = [_trials_to_reach("Bayesian", seed) for seed in seeds]
    random = [_trials_to_reach("Random", seed) for seed in seeds]
    assert sum(bayesian) < sum(random), (bayesian, random)
    assert statistics.median(bayesian) < statistics.median(random)


def test_a_seed_makes_the_search_reproducible() -> None:
    def first(strategy: str, seed: int) -> list[dict[str, str]]:
        search = _search(strategy, seed)
        found = []
        for _ in range(6):
            trial, _, tuned = search.ask()
            search.tell(trial, loss(float(tuned["lr"]), int(tuned["depth"])), stopped_early=False)
            found.append(tuned)
        return found

    for strategy in ("Random", "Bayesian"):
        assert first(strategy, 3) == first(strategy, 3)
        assert first(strategy, 3) != first(strategy, 4)


def test_values_stay_in_their_ranges_with_each_scaling() -> None:
    search = _search("Random", 0, ContinuousParameterRanges=[
        {"Name": "momentum", "MinValue": "0.5", "MaxValue": "0.999", "ScalingType": "ReverseLogarithmic"},
        {"Name": "lr", "MinValue": "0.0001", "MaxValue": "1", "ScalingType": "Logarithmic"},
        {"Name": "dropout", "MinValue": "0", "MaxValue": "0.5", "ScalingType": "Linear"}],
        IntegerParameterRanges=[{"Name": "units", "MinValue": "16", "MaxValue": "1024", "ScalingType": "Logarithmic"}],
        CategoricalParameterRanges=[{"Name": "act", "Values": ["relu", "tanh"]}])
    drawn = []
    for _ in range(400):
        trial, _, tuned = search.ask()
        search.tell(trial, 0.0, stopped_early=False)
        drawn.append(tuned)
    momentum = [float(t["momentum"]) for t in drawn]
    lr = [float(t["lr"]) for t in drawn]
    units = [int(t["units"]) for t in drawn]
    assert all(0.5 <= m <= 0.999 for m in momentum) and all(0.0001 <= x <= 1 for x in lr)
    assert all(16 <= u <= 1024 for u in units) and {t["act"] for t in drawn} == {"relu", "tanh"}
    assert all(0 <= float(t["dropout"]) <= 0.5 for t in drawn)
    # uniform in log(1 - x): most values close to 1; uniform in log x: as many below 0.01 as above
    assert statistics.median(momentum) > 0.9
    assert 0.35 < sum(x < 0.01 for x in lr) / len(lr) < 0.65
    assert statistics.median(units) < 300


def test_grid_visits_every_combination_once() -> None:
    search = _search("Grid", 0, CategoricalParameterRanges=[{"Name": "a", "Values": ["1", "2", "3"]},
                                                             {"Name": "b", "Values": ["x", "y"]}])
    seen = []
    while not search.exhausted():
        trial, _, tuned = search.ask()
        search.tell(trial, 1.0, stopped_early=False)
        seen.append((tuned["a"], tuned["b"]))
    assert sorted(seen) == sorted(itertools.product(["1", "2", "3"], ["x", "y"]))


def test_a_warm_start_adds_the_parents_trials_that_lie_in_the_ranges() -> None:
    search = _search("Bayesian", 0)
    parents = [
        {"TunedHyperParameters": {"lr": "0.1", "depth": "6"},
         "FinalHyperParameterTuningJobObjectiveMetric": {"MetricName": METRIC, "Value": 0.0}},
        {"TunedHyperParameters": {"lr": "5", "depth": "6"},  # outside lr's range now
         "FinalHyperParameterTuningJobObjectiveMetric": {"MetricName": METRIC, "Value": 1.0}},
        {"TunedHyperParameters": {"lr": "0.2", "depth": "3"}},  # no objective
    ]
    assert search.warm_start(parents) == 1
    (added,) = search.study.trials
    assert added.params == {"lr": 0.1, "depth": 6} and added.value == 0.0


# -- real tuning jobs ---------------------------------------------------------------------------------


def _most_at_once(runs_log: Path) -> int:
    running = most = 0
    for line in runs_log.read_text().splitlines():
        running += 1 if line.startswith("start") else -1
        most = max(most, running)
    return most


@pytest.mark.timeout(600)
def test_a_tuning_job_runs_its_trials_in_parallel_and_names_the_best(store: Store, objective: Path,
                                                                      tmp_path: Path) -> None:
    arn = ops.create_hyper_parameter_tuning_job(store, **request(objective, jobs=5, parallel=2))
    assert arn["HyperParameterTuningJobArn"].endswith(":hyper-parameter-tuning-job/tune")
    answer = finished(store, "tune")
    assert answer["HyperParameterTuningJobStatus"] == "Completed"
    assert answer["TrainingJobStatusCounters"]["Completed"] == 5
    assert answer["ObjectiveStatusCounters"] == {"Succeeded": 5, "Pending": 0, "Failed": 0}
    found = trials(store, "tune")
    assert len(found) == 5 and len({t["TrainingJobName"] for t in found}) == 5
    for trial in found:  # each trial's objective is what its hyperparameters give, as its last value printed
        tuned = trial["TunedHyperParameters"]
        assert value(trial) == pytest.approx(loss(float(tuned["lr"]), int(tuned["depth"])), abs=1e-5)
        assert trial["TrainingJobName"].startswith("tune-0") and trial["ObjectiveStatus"] == "Succeeded"
    best = min(found, key=value)
    assert answer["BestTrainingJob"]["TrainingJobName"] == best["TrainingJobName"]
    by_value = trials(store, "tune", SortBy="FinalObjectiveMetricValue", SortOrder="Descending", MaxResults=2)
    assert [value(t) for t in by_value] == sorted((value(t) for t in found), reverse=True)
    # the trials are training jobs of their own, which carry the tuning job's ARN
    job = sagemaker.describe_training_job(store, TrainingJobName=best["TrainingJobName"])
    assert job["TuningJobArn"] == arn["HyperParameterTuningJobArn"]
    assert job["HyperParameters"] == {"epochs": "3", **best["TunedHyperParameters"]}
    listed = sagemaker.list_training_jobs(store, MaxResults=100)["TrainingJobSummaries"]
    assert {t["TrainingJobName"] for t in found} <= {s["TrainingJobName"] for s in listed}
    assert _most_at_once(tmp_path / "runs.log") <= 2


@pytest.mark.timeout(600)
def test_early_stopping_stops_the_trials_clearly_worse_and_not_the_best(store: Store, objective: Path) -> None:
    """A Grid of four offsets: three good trials end at once; the bad one would run until stopped,
    and the median rule stops it once three trials have ended."""
    body = request(objective, strategy="Grid", jobs=None, parallel=4, static={"epochs": "5", "hold_above": "5"},
                   ranges={"CategoricalParameterRanges": [{"Name": "offset", "Values": ["0", "0.1", "0.2", "9"]}]},
                   TrainingJobEarlyStoppingType="Auto")
    ops.create_hyper_parameter_tuning_job(store, **body)
    answer = finished(store, "tune")
    assert answer["HyperParameterTuningJobStatus"] == "Completed"
    found = {t["TunedHyperParameters"]["offset"]: t for t in trials(store, "tune")}
    assert sorted(found) == ["0", "0.1", "0.2", "9"]  # the Grid visited each value once
    assert found["9"]["TrainingJobStatus"] == "Stopped"
    assert all(found[o]["TrainingJobStatus"] == "Completed" for o in ("0", "0.1", "0.2"))
    assert answer["BestTrainingJob"]["TunedHyperParameters"] == {"offset": "0"}
    assert answer["TrainingJobStatusCounters"]["Stopped"] == 1
    stopped = store.get_tuning_job("tune")
    assert stopped is not None
    assert [t["TunedHyperParameters"] for t in stopped.doc["Trials"] if t.get("StoppedEarly")] == [{"offset": "9"}]
    transitions = sagemaker.describe_training_job(store, TrainingJobName=found["9"]["TrainingJobName"])[
        "SecondaryStatusTransitions"]  # the trial's own history says why it stopped
    assert any(t["Status"] == "Stopping" and "Stopped early by hyperparameter tuning job tune" in t["StatusMessage"]
               for t in transitions)


@pytest.mark.timeout(600)
def test_stopping_a_tuning_job_stops_its_running_trials_and_starts_no_more(store: Store, objective: Path) -> None:
    body = request(objective, jobs=6, parallel=2, static={"epochs": "2", "hold_above": "-1"})  # every trial holds
    ops.create_hyper_parameter_tuning_job(store, **body)
    wait_for(lambda: sum(t["TrainingJobStatus"] == "InProgress" for t in trials(store, "tune")) == 2,
             "two trials to run", 120)
    ops.stop_hyper_parameter_tuning_job(store, HyperParameterTuningJobName="tune")
    with pytest.raises(ValidationException, match="status Stopping"):
        ops.stop_hyper_parameter_tuning_job(store, HyperParameterTuningJobName="tune")
    with pytest.raises(ResourceInUse, match="stop it before deleting it"):
        ops.delete_hyper_parameter_tuning_job(store, HyperParameterTuningJobName="tune")
    answer = finished(store, "tune")
    assert answer["HyperParameterTuningJobStatus"] == "Stopped"
    found = trials(store, "tune")
    assert len(found) == 2 and all(t["TrainingJobStatus"] == "Stopped" for t in found)
    assert answer["TrainingJobStatusCounters"]["Stopped"] == 2
    ops.delete_hyper_parameter_tuning_job(store, HyperParameterTuningJobName="tune")
    assert ops.list_hyper_parameter_tuning_jobs(store)["HyperParameterTuningJobSummaries"] == []
    assert {t["TrainingJobName"] for t in found} <= {j.name for j in store.list_jobs()}  # the trials stay


@pytest.mark.timeout(600)
def test_a_target_objective_ends_the_tuning_job_early(store: Store, objective: Path) -> None:
    body = request(objective, jobs=20, parallel=1,
                   TuningJobCompletionCriteria={"TargetObjectiveMetricValue": 1000.0})
    ops.create_hyper_parameter_tuning_job(store, **body)
    answer = finished(store, "tune")
    assert answer["HyperParameterTuningJobStatus"] == "Completed"
    assert sum(answer["TrainingJobStatusCounters"].values()) == 1  # the first trial reached the target
    assert answer["TuningJobCompletionDetails"]["NumberOfTrainingJobsObjectiveNotImproving"] == 0


@pytest.mark.timeout(600)
def test_a_warm_start_needs_ended_parents_with_the_same_objective(store: Store, objective: Path) -> None:
    ops.create_hyper_parameter_tuning_job(store, **request(objective, "parent", jobs=2, parallel=2))
    child = request(objective, "child", jobs=2, parallel=2)
    child["WarmStartConfig"] = {"ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "parent"}],
                                "WarmStartType": "IdenticalDataAndAlgorithm"}
    with pytest.raises(ValidationException, match="warm start takes parents that have ended"):
        ops.create_hyper_parameter_tuning_job(store, **child)
    finished(store, "parent")
    changed = json.loads(json.dumps(child))
    changed["TrainingJobDefinition"]["StaticHyperParameters"] = {"epochs": "2"}
    with pytest.raises(ValidationException, match="needs the same StaticHyperParameters"):
        ops.create_hyper_parameter_tuning_job(store, **changed)
    missing = json.loads(json.dumps(child))
    missing["WarmStartConfig"]["ParentHyperParameterTuningJobs"] = [{"HyperParameterTuningJobName": "nobody"}]
    with pytest.raises(ResourceNotFound):
        ops.create_hyper_parameter_tuning_job(store, **missing)
    ops.create_hyper_parameter_tuning_job(store, **child)
    assert finished(store, "child")["HyperParameterTuningJobStatus"] == "Completed"
    log = (store.home / "tuning" / "child" / "tuner.log").read_text()
    assert "warm start: 2 trials of the parent tuning jobs" in log


@pytest.mark.timeout(600)
def test_a_tuning_job_whose_tuner_dies_is_failed_by_the_next_reader(store: Store, objective: Path) -> None:
    body = request(objective, jobs=4, parallel=1, static={"epochs": "2", "hold_above": "-1"})
    ops.create_hyper_parameter_tuning_job(store, **body)
    wait_for(lambda: (row := store.get_tuning_job("tune")) is not None and row.tuner is not None, "the tuner", 60)
    row = store.get_tuning_job("tune")
    assert row is not None and row.tuner is not None
    os.kill(row.tuner["pid"], signal.SIGKILL)
    answer = finished(store, "tune", 60)
    assert answer["HyperParameterTuningJobStatus"] == "Failed"
    assert "process ended unexpectedly" in answer["FailureReason"] and "tuner.log" in answer["FailureReason"]


@pytest.mark.timeout(600)
def test_the_cli_starts_follows_and_shows_a_tuning_job(home: Path, objective: Path, tmp_path: Path) -> None:
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(request(objective, "from-cli", jobs=3, parallel=3)), encoding="utf-8")
    done = run_cli("tune", str(path), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "tuning job from-cli started" in done.stdout and "tuning job from-cli: Completed" in done.stdout
    assert done.stdout.count("from-cli-0") >= 6  # a line per trial as it ended, then the table
    listed = run_cli("tuning", "--json", check=True)
    assert [s["HyperParameterTuningJobName"] for s in json.loads(listed.stdout)] == ["from-cli"]
    shown = run_cli("tuning", "from-cli", check=True)
    assert "best" in shown.stdout and "OBJECTIVE" in shown.stdout
    again = run_cli("tune", str(path))
    assert again.returncode != 0 and "already exists" in again.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    refused = run_cli("tune", str(bad))
    assert refused.returncode == 2 and "is not JSON" in refused.stderr


# -- through the AWS endpoint ---------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_boto3_runs_a_tuning_job_through_the_aws_endpoint(server: ServerProcess, objective: Path) -> None:
    env = server.aws_env()
    sm = boto3.client("sagemaker", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                      aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                      config=Config(retries={"max_attempts": 1}))
    body = request(objective, "boto", jobs=3, parallel=3, TrainingJobEarlyStoppingType="Off")
    body["TrainingJobDefinition"].update(  # what boto3 requires of a definition
        RoleArn="arn:aws:iam::000000000000:role/trainmon", StoppingCondition={"MaxRuntimeInSeconds": 600},
        OutputDataConfig={"S3OutputPath": (objective.parent / "output").as_uri()})
    created = sm.create_hyper_parameter_tuning_job(**body)
    assert created["HyperParameterTuningJobArn"].endswith("hyper-parameter-tuning-job/boto")
    deadline = time.monotonic() + 240
    while (answer := sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="boto"))[
            "HyperParameterTuningJobStatus"] == "InProgress":
        assert time.monotonic() < deadline, "the tuning job did not end"
        time.sleep(0.3)
    assert answer["HyperParameterTuningJobStatus"] == "Completed"
    assert answer["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["MetricName"] == METRIC
    assert answer["HyperParameterTuningEndTime"] >= answer["CreationTime"]
    pages = sm.get_paginator("list_training_jobs_for_hyper_parameter_tuning_job").paginate(
        HyperParameterTuningJobName="boto", SortBy="FinalObjectiveMetricValue", SortOrder="Ascending",
        PaginationConfig={"PageSize": 2})
    summaries = [s for page in pages for s in page["TrainingJobSummaries"]]
    assert len(summaries) == 3
    assert summaries[0]["TrainingJobName"] == answer["BestTrainingJob"]["TrainingJobName"]
    listed = sm.list_hyper_parameter_tuning_jobs(StatusEquals="Completed")["HyperParameterTuningJobSummaries"]
    assert [s["HyperParameterTuningJobName"] for s in listed] == ["boto"]
    with pytest.raises(ClientError) as refused:
        sm.create_hyper_parameter_tuning_job(**body)
    assert refused.value.response["Error"]["Code"] == "ResourceInUse"
    with pytest.raises(ClientError) as missing:
        sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="nobody")
    assert missing.value.response["Error"]["Code"] == "ResourceNotFound"
    bad = json.loads(json.dumps({**body, "HyperParameterTuningJobName": "bad"}))
    bad["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]["MetricName"] = "nope"
    with pytest.raises(ClientError) as invalid:
        sm.create_hyper_parameter_tuning_job(**bad)
    assert invalid.value.response["Error"]["Code"] == "ValidationException"
    assert "'nope' is not defined" in invalid.value.response["Error"]["Message"]
    searched = sm.search(Resource="HyperParameterTuningJob", SearchExpression={"Filters": [
        {"Name": "BestTrainingJob.FinalHyperParameterTuningJobObjectiveMetric.Value", "Operator": "LessThan",
         "Value": "1000"}]})
    (found,) = searched["Results"]
    assert found["HyperParameterTuningJob"]["BestTrainingJob"]["TrainingJobName"] == \
        answer["BestTrainingJob"]["TrainingJobName"]
    sm.delete_hyper_parameter_tuning_job(HyperParameterTuningJobName="boto")


@pytest.mark.timeout(600)
def test_the_sagemaker_sdk_v2_tuner_runs_unchanged(server: ServerProcess, tmp_path: Path) -> None:
    image = tmp_path / "image"
    image.mkdir()
    train = image / "train"
    train.write_text(textwrap.dedent(f"""\
        #!{PY}
        import json, os
        with open(os.path.join(os.environ["SM_INPUT_CONFIG_DIR"], "hyperparameters.json")) as given:
            hp = json.load(given)
        lr, epochs = float(hp["lr"]), int(json.loads(hp.get("epochs", "3")))
        for epoch in range(epochs):
            print(f"epoch={{epoch}} Valid_error={{(lr - 0.1) ** 2 + 1 / (epoch + 1):.5f}};")
        """), encoding="utf-8")
    train.chmod(0o755)
    script = tmp_path / "with_sdk.py"
    script.write_text(textwrap.dedent(f"""\
        import json
        from sagemaker.estimator import Estimator
        from sagemaker.tuner import ContinuousParameter, HyperparameterTuner

        estimator = Estimator(image_uri={str(image)!r}, role="arn:aws:iam::000000000000:role/trainmon",
                              instance_count=1, instance_type="ml.m5.large", hyperparameters={{"epochs": 3}})
        tuner = HyperparameterTuner(
            estimator, objective_metric_name="validation:error", objective_type="Minimize",
            hyperparameter_ranges={{"lr": ContinuousParameter(0.001, 1.0, scaling_type="Logarithmic")}},
            metric_definitions=[{{"Name": "validation:error", "Regex": "Valid_error=(.*?);"}}],
            max_jobs=4, max_parallel_jobs=2, strategy="Bayesian", random_seed=3)
        tuner.fit(job_name="sdk-tune", wait=False)
        tuner.wait()
        frame = tuner.analytics().dataframe()
        print(json.dumps({{"best": tuner.best_training_job(), "names": sorted(frame["TrainingJobName"]),
                          "values": frame["FinalObjectiveValue"].tolist(), "lr": frame["lr"].tolist()}}))
        """), encoding="utf-8")
    config = tmp_path / ".config" / "sagemaker" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("SchemaVersion: '1.0'\nSageMaker:\n  PythonSDK:\n    Modules:\n      TelemetryOptOut: true\n"
                      "      Session:\n        DefaultS3Bucket: sagemaker-trainmon\n", encoding="utf-8")
    env = {**os.environ, **server.aws_env(), "HOME": str(tmp_path), "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
           "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found["names"]) == 4 and all(name.startswith("sdk-tune-") for name in found["names"])
    for lr, objective_value in zip(found["lr"], found["values"], strict=True):
        assert objective_value == pytest.approx((lr - 0.1) ** 2 + 1 / 3, abs=1e-4)
    best = min(zip(found["values"], found["names"], strict=True))[1]
    assert found["best"] == best


@pytest.mark.timeout(600)
def test_the_tuning_page_example_runs_as_written(store: Store, tmp_path: Path) -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "tuning.md").read_text(encoding="utf-8")
    blocks = dict(re.findall(r"^```(\w+)\n(# train\.py\n.*?|\{\n.*?)^```", page, re.MULTILINE | re.DOTALL))
    (tmp_path / "train.py").write_text(blocks["python"], encoding="utf-8")
    (tmp_path / "tuning.json").write_text(blocks["json"], encoding="utf-8")
    done = run_cli("tune", "tuning.json", timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "tuning job first-tuning: Completed" in done.stdout and "12 completed" in done.stdout
    best = ops.describe_hyper_parameter_tuning_job(store, HyperParameterTuningJobName="first-tuning")["BestTrainingJob"]
    tuned = best["TunedHyperParameters"]
    expected = (float(tuned["eta"]) - 0.2) ** 2 + (int(tuned["max_depth"]) - 6) ** 2 / 100 + 0.05
    assert value(best) == pytest.approx(expected, abs=2e-4)


@pytest.mark.timeout(600)
def test_trainmons_own_tuner_tunes_an_estimator_in_process(home: Path, tmp_path: Path) -> None:
    import trainmon

    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent("""\
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float)
        parser.add_argument("--depth", type=int)
        parser.add_argument("--optimizer")
        parser.add_argument("--epochs", type=int)
        args = parser.parse_args()
        for epoch in range(1, args.epochs + 1):
            extra = 0.0 if args.optimizer == "adam" else 1.0
            print(f"epoch {epoch} validation:loss={(args.lr - 0.1) ** 2 * 100 + (args.depth - 6) ** 2 * 0.1 + extra:.6f};")
        """), encoding="utf-8")
    estimator = trainmon.Estimator(entry_point="train.py", source_dir=str(source), hyperparameters={"epochs": 2},
                                   metric_definitions=DEFINITIONS, rules=[])
    tuner = trainmon.HyperparameterTuner(
        estimator, METRIC, {"lr": trainmon.ContinuousParameter(0.001, 1, "Logarithmic"),
                            "depth": trainmon.IntegerParameter(1, 10),
                            "optimizer": trainmon.CategoricalParameter(["adam", "sgd"])},
        objective_type="Minimize", max_jobs=4, max_parallel_jobs=2, strategy="Random", random_seed=2)
    tuner.fit(job_name="in-process")
    assert tuner.describe()["HyperParameterTuningJobStatus"] == "Completed"
    frame = tuner.analytics().dataframe()
    assert len(frame) == 4 and set(frame["TrainingJobStatus"]) == {"Completed"}
    for _, row in frame.iterrows():  # each trial's script got its tuned values as arguments
        expected = loss(row["lr"], int(row["depth"]), 0.0 if row["optimizer"] == "adam" else 1.0)
        assert row["FinalObjectiveValue"] == pytest.approx(expected, abs=1e-5)
    assert tuner.best_training_job() == frame.loc[frame["FinalObjectiveValue"].idxmin(), "TrainingJobName"]
    best = tuner.best_estimator()
    assert best.latest_training_job is not None and best.latest_training_job.job_name == tuner.best_training_job()


def test_hyperband_prunes_trials_worse_at_a_rung_and_never_the_best() -> None:
    body = request("train.py", strategy="Hyperband", jobs=30, parallel=1,
                   StrategyConfig={"HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": 9}})
    search = Search(tuning.tuning_document(body, 0.0))
    pruned, finals = [], []
    for _ in range(30):
        trial, _, tuned = search.ask()
        final = loss(float(tuned["lr"]), int(tuned["depth"]))
        curve = [final + 1.0 / step for step in range(1, 10)]
        stopped = next((step for step in range(1, 10) if search.report(trial, curve[:step], step - 1)), None)
        search.tell(trial, curve[(stopped or 9) - 1], stopped_early=stopped is not None)
        (pruned if stopped is not None and stopped < 9 else finals).append(final)
    assert pruned, "Hyperband stopped no trial at a rung"
    assert min(finals + pruned) in finals  # the best trial ran to MaxResource


@pytest.mark.timeout(600)
def test_a_hyperband_tuning_job_stops_each_trial_at_max_resource(store: Store, objective: Path) -> None:
    body = request(objective, strategy="Hyperband", jobs=3, parallel=3, static={"epochs": "4", "hold_above": "-1"},
                   StrategyConfig={"HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": 4}})
    ops.create_hyper_parameter_tuning_job(store, **body)
    answer = finished(store, "tune")
    assert answer["HyperParameterTuningJobStatus"] == "Completed"
    found = trials(store, "tune")  # each held after its 4 steps: Hyperband stopped it there, its last value kept
    assert len(found) == 3 and all(t["TrainingJobStatus"] == "Stopped" for t in found)
    for trial in found:
        tuned = trial["TunedHyperParameters"]
        assert value(trial) == pytest.approx(loss(float(tuned["lr"]), int(tuned["depth"])), abs=1e-5)
    assert answer["ObjectiveStatusCounters"]["Succeeded"] == 3


@pytest.mark.timeout(600)
def test_several_definitions_are_one_more_choice_of_the_search(store: Store, objective: Path) -> None:
    body = request(objective, jobs=6, parallel=3)
    template = body.pop("TrainingJobDefinition")
    ranges = body["HyperParameterTuningJobConfig"].pop("ParameterRanges")
    body["TrainingJobDefinitions"] = [
        {**template, "DefinitionName": "shallow", "StaticHyperParameters": {"epochs": "2", "depth": "2"},
         "HyperParameterRanges": {"ContinuousParameterRanges": ranges["ContinuousParameterRanges"]}},
        {**template, "DefinitionName": "deep", "StaticHyperParameters": {"epochs": "2", "lr": "0.1"},
         "HyperParameterRanges": {"IntegerParameterRanges": ranges["IntegerParameterRanges"]}},
    ]
    ops.create_hyper_parameter_tuning_job(store, **body)
    assert finished(store, "tune")["HyperParameterTuningJobStatus"] == "Completed"
    found = trials(store, "tune")
    assert {t["TrainingJobDefinitionName"] for t in found} == {"shallow", "deep"}
    for trial in found:
        tuned = set(trial["TunedHyperParameters"])
        assert tuned == ({"lr"} if trial["TrainingJobDefinitionName"] == "shallow" else {"depth"})
        hyperparameters = sagemaker.describe_training_job(store, TrainingJobName=trial["TrainingJobName"])[
            "HyperParameters"]
        lr, depth = float(hyperparameters["lr"]), int(hyperparameters["depth"])
        assert value(trial) == pytest.approx(loss(lr, depth), abs=1e-5)


@pytest.mark.timeout(600)
def test_the_time_limit_stops_the_running_trials_and_completes_the_tuning_job(store: Store, objective: Path) -> None:
    """The tuner in this process, on a clock the test moves: past MaxRuntimeInSeconds it stops what
    runs and starts nothing more."""
    body = request(objective, jobs=6, parallel=2, static={"epochs": "2", "hold_above": "-1"})
    body["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxRuntimeInSeconds"] = 120
    now = time.time()
    store.create_tuning_job("tune", tuning.tuning_document(body, now), now)
    clock = ManualClock(wall_s=now)
    tuner = Tuner(store, "tune", clock=clock)
    assert tuner.step() is None
    wait_for(lambda: sum(t["TrainingJobStatus"] == "InProgress" for t in trials(store, "tune")) == 2,
             "two trials to run", 120)
    clock.jump(121)
    ended: list[str | None] = []
    wait_for(lambda: ended.append(tuner.step()) or ended[-1] is not None, "the tuning job to end", 120)
    assert ended[-1] == "Completed"
    found = trials(store, "tune")
    assert len(found) == 2 and all(t["TrainingJobStatus"] == "Stopped" for t in found)


def test_search_finds_tuning_jobs_by_any_field_sorted_and_paged(store: Store) -> None:
    """Search's Resource HyperParameterTuningJob, over tuning jobs stored as CreateHyperParameterTuningJob
    stores them (their tuners not started: only their documents are searched)."""
    for number, (strategy, team, jobs) in enumerate([("Random", "vision", 4), ("Bayesian", "speech", 8),
                                                       ("Bayesian", "vision", 12), ("Random", "nlp", 6)]):
        body = request("train.py", f"t{number}", strategy=strategy, jobs=jobs, parallel=2)
        body["Tags"] = [{"Key": "team", "Value": team}]
        if number == 3:
            body["HyperParameterTuningJobConfig"]["ParameterRanges"]["IntegerParameterRanges"][0]["MaxValue"] = "20"
        store.create_tuning_job(f"t{number}", tuning.tuning_document(body, 1000.0 + number), 1000.0 + number)

    def names(**given: Any) -> list[str]:
        found = sagemaker.search(store, Resource="HyperParameterTuningJob", **given)
        return [r["HyperParameterTuningJob"]["HyperParameterTuningJobName"] for r in found["Results"]]

    def where(*filters: dict[str, str], **more: Any) -> dict[str, Any]:
        return {"SearchExpression": {"Filters": list(filters)}, **more}

    assert names(SortBy="CreationTime", SortOrder="Ascending") == ["t0", "t1", "t2", "t3"]
    assert names(**where({"Name": "HyperParameterTuningJobConfig.Strategy", "Operator": "Equals",
                          "Value": "Bayesian"}, SortBy="CreationTime")) == ["t2", "t1"]
    assert names(**where({"Name": "Tags.team", "Operator": "Equals", "Value": "vision"},
                         {"Name": "HyperParameterTuningJobConfig.ResourceLimits.MaxNumberOfTrainingJobs",
                          "Operator": "GreaterThan", "Value": "5"})) == ["t2"]
    assert names(SortBy="HyperParameterTuningJobConfig.ResourceLimits.MaxNumberOfTrainingJobs",
                 SortOrder="Descending") == ["t2", "t1", "t3", "t0"]
    nested = {"NestedFilters": [{"NestedPropertyName": "HyperParameterTuningJobConfig.ParameterRanges."
                                                       "IntegerParameterRanges",
                                 "Filters": [{"Name": "HyperParameterTuningJobConfig.ParameterRanges."
                                                      "IntegerParameterRanges.Name", "Operator": "Equals",
                                              "Value": "depth"},
                                             {"Name": "HyperParameterTuningJobConfig.ParameterRanges."
                                                      "IntegerParameterRanges.MaxValue", "Operator": "Equals",
                                              "Value": "20"}]}]}
    assert names(SearchExpression=nested) == ["t3"]
    first = sagemaker.search(store, Resource="HyperParameterTuningJob", SortBy="CreationTime", MaxResults=3)
    assert first["TotalHits"] == {"Value": 4, "Relation": "EqualTo"} and len(first["Results"]) == 3
    rest = sagemaker.search(store, Resource="HyperParameterTuningJob", SortBy="CreationTime", MaxResults=3,
                            NextToken=first["NextToken"])
    assert [r["HyperParameterTuningJob"]["HyperParameterTuningJobName"] for r in rest["Results"]] == ["t0"]
    entity = first["Results"][0]["HyperParameterTuningJob"]
    assert entity["Tags"] == [{"Key": "team", "Value": "nlp"}] and "TrainingJobStatusCounters" in entity
    with pytest.raises(ValidationException, match="it keeps no Endpoint"):
        sagemaker.search(store, Resource="Endpoint")


@pytest.mark.timeout(600)
def test_trials_that_all_fail_fail_the_tuning_job_with_the_reason(store: Store, tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import sys\nprint('no data here', file=sys.stderr)\nsys.exit(3)\n", encoding="utf-8")
    ops.create_hyper_parameter_tuning_job(store, **request(broken, jobs=10, parallel=1))
    answer = finished(store, "tune")
    assert answer["HyperParameterTuningJobStatus"] == "Failed"
    assert "The first 3 training jobs failed" in answer["FailureReason"] and METRIC in answer["FailureReason"]
    assert answer["TrainingJobStatusCounters"]["NonRetryableError"] == 3  # and no more were started
    assert answer["ObjectiveStatusCounters"]["Failed"] == 3 and "BestTrainingJob" not in answer
