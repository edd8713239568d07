"""Hyperparameter tuning jobs as documents: the CreateHyperParameterTuningJob request checked (its
shape and SageMaker's rules for ranges, strategies and limits, in AWS's words), the stored document,
each trial's CreateTrainingJob request, and the decisions that need no I/O: the trials' counters,
the best trial, early stopping by the median rule and the completion criteria.

The document keeps the request's members as given, SageMaker's describe fields (times as epoch
seconds) and ``Trials``: each trial's training job name, definition and tuned hyperparameters, in
the order they were started, plus which were stopped early. What a trial did (its status, its final
objective) is read from the trial's own job when asked, never copied here.
"""

from __future__ import annotations

import difflib
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ValidationException
from ..shapes import Integer, Json, ListOf, MapOf, Number, String, Structure, validate
from .document import ACCOUNT, REGION

NAME_PATTERN = r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,31}"
DEFINITION_NAME_PATTERN = r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}"
STRATEGIES = ("Bayesian", "Random", "Hyperband", "Grid")
STATUSES = ("Completed", "InProgress", "Failed", "Stopped", "Stopping", "Deleting", "DeleteFailed")
ACTIVE = ("InProgress", "Stopping")
MAX_TRAINING_JOBS = 500  # SageMaker's default quota per tuning job
MAX_PARALLEL = 100
MAX_RANGES = 30  # hyperparameters searched, all kinds together
MAX_GRID = 500  # combinations a Grid tuning job may visit (its number of training jobs)
EARLY_STOPPING_MIN_COMPLETED = 3  # completed trials at a step before the median rule judges that step
CONVERGENCE_MIN_TRIALS = 10

_SCALING = String(enum=("Auto", "Linear", "Logarithmic", "ReverseLogarithmic"))
_VALUE = String(max=256)
_RANGES = Structure({
    "IntegerParameterRanges": ListOf(Structure({"Name": String(max=256), "MinValue": _VALUE, "MaxValue": _VALUE,
                                                "ScalingType": _SCALING}, required=("Name", "MinValue", "MaxValue")),
                                     0, MAX_RANGES),
    "ContinuousParameterRanges": ListOf(Structure({"Name": String(max=256), "MinValue": _VALUE, "MaxValue": _VALUE,
                                                   "ScalingType": _SCALING}, required=("Name", "MinValue", "MaxValue")),
                                        0, MAX_RANGES),
    "CategoricalParameterRanges": ListOf(Structure({"Name": String(max=256), "Values": ListOf(_VALUE, 1, 30)},
                                                   required=("Name", "Values")), 0, MAX_RANGES),
    "AutoParameters": ListOf(Json(), 0, 100),
})
_OBJECTIVE = Structure({"Type": String(enum=("Maximize", "Minimize")), "MetricName": String(1, 255)},
                       required=("Type", "MetricName"))
_DEFINITION = Structure({
    "DefinitionName": String(1, 64, DEFINITION_NAME_PATTERN),
    "TuningObjective": _OBJECTIVE,
    "HyperParameterRanges": _RANGES,
    "StaticHyperParameters": MapOf(String(max=256), String(max=2500), max=100),
    # the members a trial's CreateTrainingJob request takes as they are, checked there (api.tuning)
    **{name: Json() for name in (
        "AlgorithmSpecification", "RoleArn", "InputDataConfig", "VpcConfig", "OutputDataConfig", "ResourceConfig",
        "HyperParameterTuningResourceConfig", "StoppingCondition", "EnableNetworkIsolation",
        "EnableInterContainerTrafficEncryption", "EnableManagedSpotTraining", "CheckpointConfig", "RetryStrategy",
        "Environment", "TrainmonConfig")},
}, required=("AlgorithmSpecification",))
SHAPE = Structure({
    "HyperParameterTuningJobName": String(1, 32, NAME_PATTERN,
                                          hint="1 to 32 letters, digits and hyphens, starting with a letter or digit"),
    "HyperParameterTuningJobConfig": Structure({
        "Strategy": String(enum=STRATEGIES),
        "StrategyConfig": Structure({"HyperbandStrategyConfig": Structure({
            "MinResource": Integer(min=1), "MaxResource": Integer(min=1)})}),
        "HyperParameterTuningJobObjective": _OBJECTIVE,
        "ResourceLimits": Structure({
            "MaxNumberOfTrainingJobs": Integer(1, MAX_TRAINING_JOBS),
            "MaxParallelTrainingJobs": Integer(1, MAX_PARALLEL),
            "MaxRuntimeInSeconds": Integer(120, 15_768_000),
        }, required=("MaxParallelTrainingJobs",)),
        "ParameterRanges": _RANGES,
        "TrainingJobEarlyStoppingType": String(enum=("Off", "Auto")),
        "TuningJobCompletionCriteria": Structure({
            "TargetObjectiveMetricValue": Number(),
            "BestObjectiveNotImproving": Structure({"MaxNumberOfTrainingJobsNotImproving": Integer(min=3)}),
            "ConvergenceDetected": Structure({"CompleteOnConvergence": String(enum=("Disabled", "Enabled"))}),
        }),
        "RandomSeed": Integer(min=0),
    }, required=("Strategy", "ResourceLimits")),
    "TrainingJobDefinition": _DEFINITION,
    "TrainingJobDefinitions": ListOf(_DEFINITION, 1, 10),
    "WarmStartConfig": Structure({
        "ParentHyperParameterTuningJobs": ListOf(Structure({"HyperParameterTuningJobName": String(1, 32, NAME_PATTERN)},
                                                           required=("HyperParameterTuningJobName",)), 1, 5),
        "WarmStartType": String(enum=("IdenticalDataAndAlgorithm", "TransferLearning")),
    }, required=("ParentHyperParameterTuningJobs", "WarmStartType")),
    "Tags": ListOf(Structure({"Key": String(1, 128), "Value": String(max=256)}, required=("Key", "Value")), 0, 50),
    "Autotune": Json(),
}, required=("HyperParameterTuningJobName", "HyperParameterTuningJobConfig"))


def arn(name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:hyper-parameter-tuning-job/{name.lower()}"


def tuning_document(request: Mapping[str, Any], now: float) -> dict[str, Any]:
    """A valid CreateHyperParameterTuningJob request as the document to store (InProgress, no
    trials yet); ValidationException, in AWS's words, otherwise. Each definition's training-job
    members are checked by whoever builds the trials' requests (:func:`trial_request`)."""
    checked = validate(SHAPE, request)
    config = checked["HyperParameterTuningJobConfig"]
    if ("TrainingJobDefinition" in checked) == ("TrainingJobDefinitions" in checked):
        raise ValidationException("Exactly one of TrainingJobDefinition or TrainingJobDefinitions must be provided.")
    if "Autotune" in checked:
        raise ValidationException("Autotune is not supported by trainmon: give the strategy, ranges and limits.")
    for index, definition in enumerate(definitions({**checked})):
        _check_definition(config, definition, index, len(checked.get("TrainingJobDefinitions", ())))
    _check_strategy(config, checked)
    name = checked["HyperParameterTuningJobName"]
    return {**checked, "HyperParameterTuningJobArn": arn(name), "HyperParameterTuningJobStatus": "InProgress",
            "CreationTime": now, "LastModifiedTime": now, "Trials": []}


def definitions(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The training job definitions, the single one as a list of one."""
    return list(doc["TrainingJobDefinitions"]) if "TrainingJobDefinitions" in doc else [doc["TrainingJobDefinition"]]


def objective(doc: Mapping[str, Any], definition: Mapping[str, Any]) -> dict[str, str]:
    """The objective a definition's trials are judged by: its own, else the tuning job's."""
    found = definition.get("TuningObjective") or doc["HyperParameterTuningJobConfig"].get(
        "HyperParameterTuningJobObjective")
    assert found is not None  # tuning_document made sure
    return dict(found)


def ranges(doc: Mapping[str, Any], definition: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A definition's parameter ranges: its own, else the tuning job's."""
    found = definition.get("HyperParameterRanges") or doc["HyperParameterTuningJobConfig"].get("ParameterRanges") or {}
    return {kind: list(found.get(kind, ())) for kind in
            ("IntegerParameterRanges", "ContinuousParameterRanges", "CategoricalParameterRanges")}


def _check_definition(config: Mapping[str, Any], definition: Mapping[str, Any], index: int, count: int) -> None:
    where = f"TrainingJobDefinitions[{index}]" if count else "TrainingJobDefinition"
    if count and "DefinitionName" not in definition:
        raise ValidationException(f"{where}.DefinitionName is required when TrainingJobDefinitions is given.")
    goal = definition.get("TuningObjective") or config.get("HyperParameterTuningJobObjective")
    if goal is None:
        raise ValidationException(f"{where} has no objective: give HyperParameterTuningJobConfig."
                                  "HyperParameterTuningJobObjective or the definition's TuningObjective.")
    names = [d.get("Name") for d in (definition["AlgorithmSpecification"] or {}).get("MetricDefinitions") or []
             if isinstance(d, Mapping)]
    if goal["MetricName"] not in names:
        shown = ", ".join(map(str, names)) or "none"
        close = difflib.get_close_matches(goal["MetricName"], [str(n) for n in names], n=1)
        raise ValidationException(f"The objective metric '{goal['MetricName']}' is not defined in {where}."
                                  f"AlgorithmSpecification.MetricDefinitions (defined: {shown})."
                                  + (f" Did you mean '{close[0]}'?" if close else ""))
    given = definition.get("HyperParameterRanges") or config.get("ParameterRanges") or {}
    seen: set[str] = set()
    total = 0
    for kind, entries in given.items():
        if kind == "AutoParameters":
            if entries:
                raise ValidationException("AutoParameters are not supported by trainmon: give each range.")
            continue
        for entry in entries:
            total += 1
            if entry["Name"] in seen:
                raise ValidationException(f"The hyperparameter '{entry['Name']}' is given more than one range.")
            seen.add(entry["Name"])
            if kind != "CategoricalParameterRanges":
                _check_range(kind, entry)
    if total == 0:
        raise ValidationException(f"{where} searches no hyperparameter: give at least one parameter range.")
    if total > MAX_RANGES:
        raise ValidationException(f"At most {MAX_RANGES} hyperparameters can be searched; {where} gives {total}.")
    static = set(definition.get("StaticHyperParameters", {})) & seen
    if static:
        raise ValidationException(f"Hyperparameters {', '.join(sorted(static))} are both static and tunable in "
                                  f"{where}: give each either a range or a static value.")


def _check_range(kind: str, entry: Mapping[str, Any]) -> None:
    name, scaling = entry["Name"], entry.get("ScalingType", "Auto")
    integer = kind == "IntegerParameterRanges"
    low, high = (_parse(entry[bound], integer, name, bound) for bound in ("MinValue", "MaxValue"))
    if low > high:
        raise ValidationException(f"The MinValue {entry['MinValue']} of the hyperparameter '{name}' is greater than "
                                  f"its MaxValue {entry['MaxValue']}.")
    if scaling == "Logarithmic" and low <= 0:
        raise ValidationException(f"The hyperparameter '{name}' is scaled logarithmically, so its range must be "
                                  "greater than 0.")
    if scaling == "ReverseLogarithmic":
        if integer:
            raise ValidationException(f"ReverseLogarithmic scaling is only supported for continuous hyperparameters; "
                                      f"'{name}' is an integer.")
        if not (0 <= low and high < 1):
            raise ValidationException(f"The hyperparameter '{name}' is scaled reverse logarithmically, so its range "
                                      "must be at least 0 and less than 1.")


def _parse(text: str, integer: bool, name: str, bound: str) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ValidationException(f"The {bound} '{text}' of the hyperparameter '{name}' is not {kind}.") from None
    if not math.isfinite(value):
        raise ValidationException(f"The {bound} of the hyperparameter '{name}' must be finite, not {text}.")
    return value


def bounds(kind: str, entry: Mapping[str, Any]) -> tuple[float, float]:
    integer = kind == "IntegerParameterRanges"
    return _parse(entry["MinValue"], integer, entry["Name"], "MinValue"), _parse(
        entry["MaxValue"], integer, entry["Name"], "MaxValue")


def _check_strategy(config: Mapping[str, Any], doc: Mapping[str, Any]) -> None:
    strategy = config["Strategy"]
    limits = config["ResourceLimits"]
    if strategy == "Grid":
        if "MaxNumberOfTrainingJobs" in limits:
            raise ValidationException("MaxNumberOfTrainingJobs must not be given with the Grid strategy: the number "
                                      "of training jobs is the number of combinations of the categorical values.")
        if len(definitions(doc)) > 1:
            raise ValidationException("The Grid strategy takes one training job definition.")
        found = ranges(doc, definitions(doc)[0])
        if found["IntegerParameterRanges"] or found["ContinuousParameterRanges"]:
            raise ValidationException("The Grid strategy supports only CategoricalParameterRanges.")
        size = grid_size(found)
        if size > MAX_GRID:
            raise ValidationException(f"The Grid strategy's ranges give {size} combinations; at most {MAX_GRID} "
                                      "training jobs can be run.")
    elif "MaxNumberOfTrainingJobs" not in limits:
        raise ValidationException(f"ResourceLimits.MaxNumberOfTrainingJobs is required with the {strategy} strategy.")
    elif limits["MaxParallelTrainingJobs"] > limits["MaxNumberOfTrainingJobs"]:
        raise ValidationException("MaxParallelTrainingJobs must be less than or equal to MaxNumberOfTrainingJobs.")
    if "StrategyConfig" in config and strategy != "Hyperband":
        raise ValidationException("StrategyConfig is only supported with the Hyperband strategy.")
    if strategy == "Hyperband":
        if config.get("TrainingJobEarlyStoppingType", "Off") != "Off":
            raise ValidationException("TrainingJobEarlyStoppingType must be Off with the Hyperband strategy: "
                                      "Hyperband stops training jobs by itself.")
        hyperband = config.get("StrategyConfig", {}).get("HyperbandStrategyConfig", {})
        if hyperband.get("MinResource", 1) > hyperband.get("MaxResource", math.inf):
            raise ValidationException("HyperbandStrategyConfig.MinResource must be less than or equal to MaxResource.")
    if len(definitions(doc)) > 1:
        kinds = {(goal["Type"], goal["MetricName"]) for goal in (objective(doc, d) for d in definitions(doc))}
        if len(kinds) > 1:
            raise ValidationException("Every training job definition must have the same tuning objective.")
        names = [d["DefinitionName"] for d in definitions(doc)]
        if len(set(names)) < len(names):
            raise ValidationException("Each training job definition's DefinitionName must be unique.")


def grid_size(found: Mapping[str, Sequence[Mapping[str, Any]]]) -> int:
    """How many combinations of categorical values a Grid visits."""
    return math.prod(len(entry["Values"]) for entry in found["CategoricalParameterRanges"])


def max_trials(doc: Mapping[str, Any]) -> int:
    """How many trials the tuning job runs at most: its limit, or a Grid's every combination."""
    limits = doc["HyperParameterTuningJobConfig"]["ResourceLimits"]
    if "MaxNumberOfTrainingJobs" in limits:
        return int(limits["MaxNumberOfTrainingJobs"])
    return grid_size(ranges(doc, definitions(doc)[0]))


def trial_name(tuning_name: str, number: int, suffix: str) -> str:
    """SageMaker's form: the tuning job's name, the trial's number, a random part."""
    return f"{tuning_name}-{number:03d}-{suffix}"


_TRAINING_MEMBERS = ("AlgorithmSpecification", "RoleArn", "InputDataConfig", "VpcConfig", "OutputDataConfig",
                     "StoppingCondition", "EnableNetworkIsolation", "EnableInterContainerTrafficEncryption",
                     "EnableManagedSpotTraining", "CheckpointConfig", "RetryStrategy", "Environment", "TrainmonConfig")


def trial_request(doc: Mapping[str, Any], definition: Mapping[str, Any], name: str,
                  tuned: Mapping[str, str]) -> dict[str, Any]:
    """The CreateTrainingJob request of one trial: the definition's members, its static
    hyperparameters and the tuned ones, and the tuning job's tags (SageMaker gives them to its
    training jobs)."""
    request: dict[str, Any] = {"TrainingJobName": name}
    request.update((member, definition[member]) for member in _TRAINING_MEMBERS if member in definition)
    request["HyperParameters"] = {**definition.get("StaticHyperParameters", {}), **tuned}
    resources = definition.get("ResourceConfig")
    if resources is None and "HyperParameterTuningResourceConfig" in definition:
        given = definition["HyperParameterTuningResourceConfig"]
        first = (given.get("InstanceConfigs") or [given])[0]
        resources = {key: first[key] for key in ("InstanceType", "InstanceCount", "VolumeSizeInGB") if key in first}
    if resources is not None:
        request["ResourceConfig"] = resources
    if doc.get("Tags"):
        request["Tags"] = doc["Tags"]
    return request


def format_value(kind: str, value: Any) -> str:
    """A tuned value as the hyperparameter string the training job receives."""
    if kind == "IntegerParameterRanges":
        return str(int(value))
    if kind == "ContinuousParameterRanges":
        return repr(float(value))
    return str(value)


# -- what the trials did


def counters(statuses: Sequence[str], objectives: Sequence[float | None]) -> tuple[dict[str, int], dict[str, int]]:
    """TrainingJobStatusCounters and ObjectiveStatusCounters of trials by their status and final
    objective (None: none reported)."""
    jobs = {"Completed": 0, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 0, "Stopped": 0}
    goals = {"Succeeded": 0, "Pending": 0, "Failed": 0}
    for status, value in zip(statuses, objectives, strict=True):
        jobs[{"Failed": "NonRetryableError", "Stopping": "InProgress"}.get(status, status)] += 1
        goals[objective_status(status, value)] += 1
    return jobs, goals


def objective_status(status: str, value: float | None) -> str:
    if status in ACTIVE:
        return "Pending"
    return "Succeeded" if value is not None and status in ("Completed", "Stopped") else "Failed"


def better(a: float, b: float, minimize: bool) -> bool:
    return a < b if minimize else a > b


def best_index(values: Sequence[float | None], minimize: bool) -> int | None:
    """The position of the best objective (the first of equals); None when none was reported."""
    best: int | None = None
    for index, value in enumerate(values):
        if value is not None and (best is None or better(value, values[best], minimize)):  # type: ignore[arg-type]
            best = index
    return best


def worse_than_median(curve: Sequence[float], finished: Sequence[Sequence[float]], minimize: bool) -> bool:
    """SageMaker's early-stopping rule for a running trial whose objective so far is ``curve`` (a
    value a step): its value at a step is worse than the median of the running averages, up to
    that step, of the finished trials that reached it. The step judged is the latest that at
    least :data:`EARLY_STOPPING_MIN_COMPLETED` finished trials reached (a trial that runs longer
    than those that ended is judged where they can still be compared)."""
    lengths = sorted((len(other) for other in finished), reverse=True)
    if len(lengths) < EARLY_STOPPING_MIN_COMPLETED:
        return False
    step = min(len(curve), lengths[EARLY_STOPPING_MIN_COMPLETED - 1])
    if step == 0:
        return False
    averages = [statistics.fmean(other[:step]) for other in finished if len(other) >= step]
    return better(statistics.median(averages), curve[step - 1], minimize)


def completion(config: Mapping[str, Any], finished: Sequence[float | None]) -> tuple[str | None, int, bool]:
    """Whether the completion criteria end the tuning job after the trials ``finished`` (their final
    objectives, in the order they ended): the reason or None, how many trials since the best one
    did not improve on it, and whether the search has converged.

    Convergence (trainmon's rule, as SageMaker does not publish its own): at least
    :data:`CONVERGENCE_MIN_TRIALS` trials with an objective, and the last fifth of them (at least
    5) improved the best by less than 1% of the spread of every objective seen."""
    minimize = config.get("HyperParameterTuningJobObjective", {}).get("Type", "Minimize") == "Minimize"
    criteria = config.get("TuningJobCompletionCriteria", {})
    values = [value for value in finished if value is not None]
    if not values:
        return None, 0, False
    best = best_index(values, minimize)
    assert best is not None
    not_improving = len(values) - 1 - best
    converged = False
    if len(values) >= CONVERGENCE_MIN_TRIALS:
        recent = max(5, len(values) // 5)
        before = values[:-recent]
        best_before = min(before) if minimize else max(before)
        gain = (best_before - values[best]) if minimize else (values[best] - best_before)
        converged = gain < 0.01 * (max(values) - min(values))
    target = criteria.get("TargetObjectiveMetricValue")
    if target is not None and not better(target, values[best], minimize):
        return "TargetObjectiveMetricValue", not_improving, converged
    limit = criteria.get("BestObjectiveNotImproving", {}).get("MaxNumberOfTrainingJobsNotImproving")
    if limit is not None and not_improving >= limit:
        return "BestObjectiveNotImproving", not_improving, converged
    if converged and criteria.get("ConvergenceDetected", {}).get("CompleteOnConvergence") == "Enabled":
        return "ConvergenceDetected", not_improving, converged
    return None, not_improving, converged
