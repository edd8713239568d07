"""A HyperparameterTuner like the SageMaker Python SDK v2's, tuning a :class:`trainmon.Estimator`
through trainmon's tuning jobs in process (no server):

    from trainmon import ContinuousParameter, Estimator, HyperparameterTuner, IntegerParameter

    tuner = HyperparameterTuner(estimator, "validation:error",
                                {"eta": ContinuousParameter(0.01, 1, "Logarithmic"), "max_depth": IntegerParameter(2, 10)},
                                objective_type="Minimize", max_jobs=12, max_parallel_jobs=3)
    tuner.fit()
    tuner.best_training_job(); tuner.analytics().dataframe()

The estimator's own settings become the training job definition (its hyperparameters that are not
tuned the static ones); an ``entry_point`` estimator's trials run in script mode, as the SDK's
framework estimators' do, so each trial's tuned values reach the script as ``--name value``.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..api import tuning
from ..errors import TrainmonError
from .estimator import Estimator, Session


@dataclass(frozen=True)
class _Range:
    min_value: float
    max_value: float
    scaling_type: str = "Auto"

    def as_range(self, name: str) -> dict[str, str]:
        return {"Name": name, "MinValue": str(self.min_value), "MaxValue": str(self.max_value),
                "ScalingType": self.scaling_type}


class ContinuousParameter(_Range):
    """A range of real values (ContinuousParameterRanges)."""


class IntegerParameter(_Range):
    """A range of whole values (IntegerParameterRanges)."""


class CategoricalParameter:
    def __init__(self, values: Any) -> None:
        self.values = [values] if isinstance(values, (str, int, float)) else list(values)

    def as_range(self, name: str) -> dict[str, Any]:
        return {"Name": name, "Values": [v if isinstance(v, str) else json.dumps(v) for v in self.values]}


_KINDS = {ContinuousParameter: "ContinuousParameterRanges", IntegerParameter: "IntegerParameterRanges",
          CategoricalParameter: "CategoricalParameterRanges"}
_DEFINITION_MEMBERS = ("AlgorithmSpecification", "RoleArn", "InputDataConfig", "OutputDataConfig", "ResourceConfig",
                       "StoppingCondition", "Environment", "TrainmonConfig")


class HyperparameterTuner:
    """The SDK v2 HyperparameterTuner's arguments that make sense off AWS, same names and meanings."""

    def __init__(self, estimator: Estimator, objective_metric_name: str,
                 hyperparameter_ranges: dict[str, ContinuousParameter | IntegerParameter | CategoricalParameter],
                 metric_definitions: list[dict[str, str]] | None = None, strategy: str = "Bayesian",
                 objective_type: str = "Maximize", max_jobs: int | None = None, max_parallel_jobs: int = 1,
                 max_runtime_in_seconds: int | None = None, tags: list[dict[str, str]] | None = None,
                 base_tuning_job_name: str | None = None, warm_start_config: dict[str, Any] | None = None,
                 early_stopping_type: str = "Off", random_seed: int | None = None,
                 completion_criteria_config: dict[str, Any] | None = None,
                 strategy_config: dict[str, Any] | None = None) -> None:
        self.estimator = estimator
        self.objective_metric_name = objective_metric_name
        self._ranges = dict(hyperparameter_ranges)
        self.metric_definitions = metric_definitions
        self.strategy = strategy
        self.objective_type = objective_type
        self.max_jobs = max_jobs if max_jobs is not None or strategy == "Grid" else 1
        self.max_parallel_jobs = max_parallel_jobs
        self.max_runtime_in_seconds = max_runtime_in_seconds
        self.tags = tags
        self.base_tuning_job_name = base_tuning_job_name
        self.warm_start_config = warm_start_config
        self.early_stopping_type = early_stopping_type
        self.random_seed = random_seed
        self.completion_criteria_config = completion_criteria_config
        self.strategy_config = strategy_config
        self.sagemaker_session: Session = estimator.sagemaker_session
        self.latest_tuning_job: str | None = None

    def hyperparameter_ranges(self) -> dict[str, list[dict[str, Any]]]:
        """The ranges as CreateHyperParameterTuningJob takes them."""
        found: dict[str, list[dict[str, Any]]] = {kind: [] for kind in _KINDS.values()}
        for name, given in self._ranges.items():
            found[_KINDS[type(given)]].append(given.as_range(name))
        return found

    def fit(self, inputs: str | dict[str, str] | None = None, job_name: str | None = None, wait: bool = True) -> None:
        name = job_name or self._job_name()
        tuning.create_hyper_parameter_tuning_job(self.sagemaker_session.store, **self._request(name, inputs))
        self.latest_tuning_job = name
        if wait:
            self.wait()

    def wait(self, poll: float = 0.5) -> dict[str, Any]:
        while (found := self.describe())["HyperParameterTuningJobStatus"] in ("InProgress", "Stopping"):
            time.sleep(poll)
        return found

    def describe(self) -> dict[str, Any]:
        return tuning.describe_hyper_parameter_tuning_job(self.sagemaker_session.store,
                                                          HyperParameterTuningJobName=self._require())

    def stop_tuning_job(self) -> None:
        tuning.stop_hyper_parameter_tuning_job(self.sagemaker_session.store, HyperParameterTuningJobName=self._require())

    def best_training_job(self) -> str:
        best = self.describe().get("BestTrainingJob")
        if best is None:
            raise TrainmonError(f"No best training job available for tuning job {self._require()}: no trial has "
                                "reported the objective yet.")
        return str(best["TrainingJobName"])

    def best_estimator(self) -> Estimator:
        return Estimator.attach(self.best_training_job(), sagemaker_session=self.sagemaker_session)

    def analytics(self) -> HyperparameterTuningJobAnalytics:
        return HyperparameterTuningJobAnalytics(self._require(), self.sagemaker_session)

    def _require(self) -> str:
        if self.latest_tuning_job is None:
            raise ValueError("This tuner has no tuning job yet: call fit().")
        return self.latest_tuning_job

    def _job_name(self) -> str:
        base = re.sub(r"[^a-zA-Z0-9-]+", "-", self.base_tuning_job_name or "tuning").strip("-")[:12] or "tuning"
        return f"{base}-{datetime.now(UTC).strftime('%y%m%d-%H%M%S-%f')[:-3]}"[:32]

    def _request(self, name: str, inputs: str | dict[str, str] | None) -> dict[str, Any]:
        training = self.estimator._request("trial", inputs)  # the estimator's job, as the definition's template
        tuned = set(self._ranges)
        static = {key: value for key, value in training["HyperParameters"].items() if key not in tuned}
        algorithm = dict(training["AlgorithmSpecification"])
        if self.metric_definitions is not None:
            algorithm["MetricDefinitions"] = self.metric_definitions
        if self.estimator.entry_point is not None:  # script mode: the trials' values become the script's arguments
            source = Path(self.estimator.source_dir or ".").expanduser().resolve()
            algorithm.pop("ContainerEntrypoint")
            static.update(sagemaker_program=json.dumps(self.estimator.entry_point),
                          sagemaker_submit_directory=json.dumps(str(source)))
        definition = {key: training[key] for key in _DEFINITION_MEMBERS if key in training}
        definition.update(AlgorithmSpecification=algorithm, StaticHyperParameters=static)
        config: dict[str, Any] = {
            "Strategy": self.strategy,
            "HyperParameterTuningJobObjective": {"Type": self.objective_type, "MetricName": self.objective_metric_name},
            "ResourceLimits": {"MaxParallelTrainingJobs": self.max_parallel_jobs,
                               **({"MaxNumberOfTrainingJobs": self.max_jobs} if self.max_jobs is not None else {}),
                               **({"MaxRuntimeInSeconds": self.max_runtime_in_seconds}
                                  if self.max_runtime_in_seconds is not None else {})},
            "ParameterRanges": self.hyperparameter_ranges(),
            "TrainingJobEarlyStoppingType": self.early_stopping_type,
        }
        for key, value in (("RandomSeed", self.random_seed), ("TuningJobCompletionCriteria",
                                                              self.completion_criteria_config),
                           ("StrategyConfig", self.strategy_config)):
            if value is not None:
                config[key] = value
        request: dict[str, Any] = {"HyperParameterTuningJobName": name, "HyperParameterTuningJobConfig": config,
                                   "TrainingJobDefinition": definition}
        if self.tags:
            request["Tags"] = self.tags
        if self.warm_start_config is not None:
            request["WarmStartConfig"] = self.warm_start_config
        return request


class HyperparameterTuningJobAnalytics:
    """A tuning job's trials as a DataFrame, as the SDK's: the tuned values, each trial's name,
    status, final objective and times."""

    def __init__(self, hyperparameter_tuning_job_name: str, sagemaker_session: Session | None = None) -> None:
        self.name = hyperparameter_tuning_job_name
        self.session = sagemaker_session or Session()

    def training_job_summaries(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        request: dict[str, Any] = {"HyperParameterTuningJobName": self.name, "MaxResults": 100}
        while True:
            page = tuning.list_training_jobs_for_hyper_parameter_tuning_job(self.session.store, **request)
            found += page["TrainingJobSummaries"]
            if "NextToken" not in page:
                return found
            request["NextToken"] = page["NextToken"]

    def dataframe(self) -> Any:
        import pandas as pd

        rows = []
        for summary in self.training_job_summaries():
            row: dict[str, Any] = {key: _number(value) for key, value in summary["TunedHyperParameters"].items()}
            metric = summary.get("FinalHyperParameterTuningJobObjectiveMetric")
            start, end = summary.get("TrainingStartTime"), summary.get("TrainingEndTime")
            row.update(TrainingJobName=summary["TrainingJobName"], TrainingJobStatus=summary["TrainingJobStatus"],
                       FinalObjectiveValue=metric["Value"] if metric else None, TrainingStartTime=start,
                       TrainingEndTime=end,
                       TrainingElapsedTimeSeconds=(end - start).total_seconds() if start and end else None)
            if "TrainingJobDefinitionName" in summary:
                row["TrainingJobDefinitionName"] = summary["TrainingJobDefinitionName"]
            rows.append(row)
        return pd.DataFrame(rows)


def _number(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


__all__ = ["CategoricalParameter", "ContinuousParameter", "HyperparameterTuner", "HyperparameterTuningJobAnalytics",
           "IntegerParameter"]
