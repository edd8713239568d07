"""SageMaker's hyperparameter tuning operations: CreateHyperParameterTuningJob,
DescribeHyperParameterTuningJob, ListHyperParameterTuningJobs,
ListTrainingJobsForHyperParameterTuningJob, StopHyperParameterTuningJob and
DeleteHyperParameterTuningJob.

A tuning job is a document (:mod:`trainmon.jobs.tuning`) and a process of its own, its tuner
(``python -m trainmon.tuning``), which chooses each trial's hyperparameters and starts the trial as
an ordinary training job carrying the tuning job's ARN. Every answer about trials (counters, the
best one, the summaries) is read from the trials' own jobs and final metrics when asked. A tuning
job whose tuner died is failed by the next reader, as a training job's orphan is.
"""

from __future__ import annotations

import importlib.util
import socket
import time
from collections.abc import Callable
from typing import Any

from .. import config
from ..errors import ResourceInUse, ResourceNotFound, TrainmonError, ValidationException
from ..jobs import tuning
from ..jobs.search import Property, Search, matches, properties, sort_key
from ..runtime.job import detached, orphans
from ..shapes import (
    Integer,
    Shape,
    String,
    keyset_place,
    keyset_token,
    offset_page,
    refuse_unknown,
    request_fingerprint,
    validate_members,
)
from ..store import JobRow, Store, TuningRow
from ..store.tuning import place
from .times import as_datetimes, epoch_s
from .training_request import job_document

ENTRY = "trainmon.tuning"  # the tuner's module, run as a process of its own
TUNER_MARK = "TRAINMON_TUNER_OF"  # in a tuner's environment: whose tuner it is
_NAME = String(1, 32, tuning.NAME_PATTERN, hint="1 to 32 letters, digits and hyphens, starting with a letter or digit")
_SORT_KINDS = {"Name": str, "CreationTime": float, "Status": str}
_DESCRIBED = ("HyperParameterTuningJobName", "HyperParameterTuningJobArn", "HyperParameterTuningJobConfig",
              "TrainingJobDefinition", "TrainingJobDefinitions", "HyperParameterTuningJobStatus", "CreationTime",
              "HyperParameterTuningEndTime", "LastModifiedTime", "WarmStartConfig", "FailureReason")


def create_hyper_parameter_tuning_job(store: Store, **request: Any) -> dict[str, Any]:
    """Check the request (each definition as its trials' CreateTrainingJob requests will be
    checked, the parents of a warm start), store the tuning job and start its tuner; returns at
    once, as SageMaker does."""
    now = time.time()
    doc = tuning.tuning_document(request, now)
    for definition in tuning.definitions(doc):
        _check_trials(store, doc, definition, now)
    if "WarmStartConfig" in doc:
        _check_parents(store, doc)
    if importlib.util.find_spec("optuna") is None:
        raise ValidationException("Hyperparameter tuning needs Optuna, which is not installed: "
                                  "pip install 'trainmon[tuning]'.")
    name = doc["HyperParameterTuningJobName"]
    store.create_tuning_job(name, doc, now)
    try:
        start_tuner(store, name)
    except OSError as exc:
        reason = f"InternalServerError: trainmon could not start the tuning job's process: {exc}"
        finish(store, name, "Failed", FailureReason=reason)
        raise TrainmonError(reason) from None
    return {"HyperParameterTuningJobArn": doc["HyperParameterTuningJobArn"]}


def _check_trials(store: Store, doc: dict[str, Any], definition: dict[str, Any], now: float) -> None:
    """A definition's trial request, with each range's least value, checked as CreateTrainingJob
    checks it; its problems named after the definition."""
    found = tuning.ranges(doc, definition)
    least = {entry["Name"]: tuning.format_value(kind, tuning.bounds(kind, entry)[0])
             for kind in ("IntegerParameterRanges", "ContinuousParameterRanges") for entry in found[kind]}
    least.update((entry["Name"], entry["Values"][0]) for entry in found["CategoricalParameterRanges"])
    request = tuning.trial_request(doc, definition, tuning.trial_name(doc["HyperParameterTuningJobName"], 1, "0" * 8),
                                   least)
    try:
        job_document(request, now, home=store.home, database_url=store.database_url)
    except ValidationException as exc:
        where = ("TrainingJobDefinitions " + definition["DefinitionName"] if "TrainingJobDefinitions" in doc
                 else "TrainingJobDefinition")
        raise ValidationException(f"{where}: {exc.message}") from None


def _check_parents(store: Store, doc: dict[str, Any]) -> None:
    warm = doc["WarmStartConfig"]
    goal = tuning.objective(doc, tuning.definitions(doc)[0])
    for parent in warm["ParentHyperParameterTuningJobs"]:
        name = parent["HyperParameterTuningJobName"]
        row = store.get_tuning_job(name)
        if row is None:
            raise ResourceNotFound(f"Amazon SageMaker can't find a tuning job with name {name}")
        if row.status in tuning.ACTIVE:
            raise ValidationException(f"The parent tuning job {name} is {row.status}: a warm start takes parents "
                                      "that have ended.")
        if tuning.objective(row.doc, tuning.definitions(row.doc)[0]) != goal:
            raise ValidationException(f"The parent tuning job {name} has another objective: a warm start's parents "
                                      "must have the same objective metric and type.")
        if warm["WarmStartType"] == "IdenticalDataAndAlgorithm":
            mine, theirs = tuning.definitions(doc)[0], tuning.definitions(row.doc)[0]
            for member in ("AlgorithmSpecification", "InputDataConfig", "StaticHyperParameters"):
                if mine.get(member) != theirs.get(member):
                    raise ValidationException(f"WarmStartType IdenticalDataAndAlgorithm needs the same {member} as "
                                              f"the parent tuning job {name}; use TransferLearning to change it.")


def start_tuner(store: Store, name: str) -> None:
    """The tuner of ``name`` as a process of its own, in its own session, writing to
    ``<home>/tuning/<name>/tuner.log``; recorded as the tuning job's tuner."""
    started = detached.spawn(ENTRY, name, store, config.tuning_dir(store.home, name) / "tuner.log",
                             **{TUNER_MARK: name})
    if started is None:
        return  # it ended already (and recorded itself, or the next reader fails the tuning job)

    def adopt(row: TuningRow) -> None:
        if row.tuner is None:
            row.tuner = dict(started)

    store.update_tuning_job(name, adopt)


def finish(store: Store, name: str, status: str, **fields: Any) -> TuningRow:
    """End a tuning job: its status, end time and ``fields`` (FailureReason, ...)."""

    def mutate(row: TuningRow) -> None:
        now = time.time()
        row.doc.update(fields, HyperParameterTuningJobStatus=status, HyperParameterTuningEndTime=now,
                       LastModifiedTime=now)
        row.last_modified_time = now

    return store.update_tuning_job(name, mutate)


def reap(store: Store, row: TuningRow) -> TuningRow:
    """A tuning job whose tuner, on this machine, is gone while it is active: Failed."""
    tuner = row.tuner
    if row.status not in tuning.ACTIVE or tuner is None or tuner.get("hostname") != socket.gethostname():
        return row
    if orphans.alive(tuner):  # type: ignore[arg-type]  # (the same identity a supervisor has)
        return row
    log = config.tuning_dir(store.home, row.name) / "tuner.log"
    status = "Stopped" if row.status == "Stopping" else "Failed"
    reason = None if status == "Stopped" else f"The tuning job's process ended unexpectedly; see {log}."

    def mutate(found: TuningRow) -> None:
        if found.tuner == tuner and found.status in tuning.ACTIVE:
            now = time.time()
            found.doc.update(HyperParameterTuningJobStatus=status, HyperParameterTuningEndTime=now,
                             LastModifiedTime=now, **({"FailureReason": reason} if reason else {}))
            found.last_modified_time = now

    return store.update_tuning_job(row.name, mutate)


def tuning_job(store: Store, name: Any) -> TuningRow:
    """The tuning job of that name, its tuner's and its trials' orphans reaped first."""
    validate_members({"HyperParameterTuningJobName": _NAME}, {"HyperParameterTuningJobName": name})
    orphans.reap_orphans(store)
    row = store.get_tuning_job(name)
    if row is None:
        raise ResourceNotFound(f"Amazon SageMaker can't find a tuning job with name {name}")
    return reap(store, row)


# -- what the trials did


def trial_summaries(store: Store, row: TuningRow) -> list[dict[str, Any]]:
    """Each trial that still exists as ListTrainingJobsForHyperParameterTuningJob summarises it
    (times as epoch seconds), in the order the trials were started (the caller reaped orphans)."""
    trials = row.doc.get("Trials", [])
    jobs = {job.name: job for job in store.jobs_named([trial["TrainingJobName"] for trial in trials])}
    finals = store.final_metrics_of([job.id for job in jobs.values()])
    found = []
    for trial in trials:
        job = jobs.get(trial["TrainingJobName"])
        if job is not None:
            found.append(summary(row, trial, job, finals.get(job.id, [])))
    return found


def summary(row: TuningRow, trial: dict[str, Any], job: JobRow, finals: list[tuple[str, float, int]]) -> dict[str, Any]:
    definition = next((d for d in tuning.definitions(row.doc) if d.get("DefinitionName") == trial.get(
        "TrainingJobDefinitionName")), tuning.definitions(row.doc)[0])
    goal = tuning.objective(row.doc, definition)
    value = next((value for name, value, _ in finals if name == goal["MetricName"]), None)
    doc = job.doc
    fields: dict[str, Any] = {
        "TrainingJobName": job.name, "TrainingJobArn": doc["TrainingJobArn"], "TuningJobName": row.name,
        "CreationTime": job.creation_time, "TrainingJobStatus": job.status,
        "TunedHyperParameters": trial["TunedHyperParameters"],
        "ObjectiveStatus": tuning.objective_status(job.status, value),
    }
    if "TrainingJobDefinitionName" in trial:
        fields["TrainingJobDefinitionName"] = trial["TrainingJobDefinitionName"]
    for key in ("TrainingStartTime", "TrainingEndTime", "FailureReason"):
        if key in doc:
            fields[key] = doc[key]
    if value is not None and fields["ObjectiveStatus"] == "Succeeded":
        fields["FinalHyperParameterTuningJobObjectiveMetric"] = {"Type": goal["Type"],
                                                                 "MetricName": goal["MetricName"], "Value": value}
    return fields


def _objective_value(summary: dict[str, Any]) -> float | None:
    metric = summary.get("FinalHyperParameterTuningJobObjectiveMetric")
    return None if metric is None else float(metric["Value"])


def best(row: TuningRow, summaries: list[dict[str, Any]]) -> dict[str, Any] | None:
    minimize = tuning.objective(row.doc, tuning.definitions(row.doc)[0])["Type"] == "Minimize"
    index = tuning.best_index([_objective_value(s) for s in summaries], minimize)
    return None if index is None else summaries[index]


def described(row: TuningRow, summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob's answer (times as epoch seconds)."""
    doc = row.doc
    answer = {key: doc[key] for key in _DESCRIBED if key in doc}
    jobs, goals = tuning.counters([s["TrainingJobStatus"] for s in summaries],
                                  [_objective_value(s) for s in summaries])
    answer["TrainingJobStatusCounters"], answer["ObjectiveStatusCounters"] = jobs, goals
    found = best(row, summaries)
    if found is not None:
        answer["BestTrainingJob"] = found
    if "TuningJobCompletionDetails" in doc:
        answer["TuningJobCompletionDetails"] = doc["TuningJobCompletionDetails"]
    end = doc.get("HyperParameterTuningEndTime") or time.time()
    answer["ConsumedResources"] = {"RuntimeInSeconds": max(0, int(end - doc["CreationTime"]))}
    return answer


def answered(row: TuningRow, trials: list[dict[str, Any]]) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob's answer with every trial's summary as
    ListTrainingJobsForHyperParameterTuningJob gives them (by name), from one read of the trials."""
    return {**_datetimes(described(row, trials)),
            "TrainingJobSummaries": [as_datetimes(s) for s in sorted(trials, key=_TRIAL_ORDERS["Name"])]}


def _datetimes(answer: dict[str, Any]) -> dict[str, Any]:
    out = as_datetimes(answer)
    if "BestTrainingJob" in out:
        out["BestTrainingJob"] = as_datetimes(out["BestTrainingJob"])
    details = out.get("TuningJobCompletionDetails")
    if details and "ConvergenceDetectedTime" in details:
        out["TuningJobCompletionDetails"] = as_datetimes(details)
    return out


def search_entities(store: Store, request: Search, offset: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """Search over tuning jobs: those that match, in the request's order, from ``offset`` (at most
    ``limit``), each as Search's HyperParameterTuningJob; and how many match. Run in Python over
    each tuning job's properties, as there are tens of them, not the hundred thousands of jobs."""
    matched: list[tuple[dict[str, Any], list[Property]]] = []
    orphans.reap_orphans(store)
    for row in store.tuning_jobs_after(None, None):
        entity = {**described(reap(store, row), trial_summaries(store, row)), "Tags": row.doc.get("Tags", [])}
        found = properties(entity)  # type: ignore[arg-type]  # (a document of the same kind: fields and tags)
        if matches(found, request.expression):
            matched.append((entity, found))
    present = [(key, entity) for entity, found in matched if (key := sort_key(found, request.sort_by)) is not None]
    present.sort(key=lambda pair: pair[0], reverse=request.descending)
    missing = [entity for entity, found in matched if sort_key(found, request.sort_by) is None]
    ordered = [entity for _, entity in present] + missing
    return [_datetimes(entity) for entity in ordered[offset:offset + limit]], len(matched)


def describe_hyper_parameter_tuning_job(store: Store, *, HyperParameterTuningJobName: Any = None,
                                        **unsupported: Any) -> dict[str, Any]:
    refuse_unknown(unsupported, where="input")
    row = tuning_job(store, HyperParameterTuningJobName)
    return _datetimes(described(row, trial_summaries(store, row)))


def list_hyper_parameter_tuning_jobs(
    store: Store, *, NextToken: Any = None, MaxResults: Any = 10, SortBy: Any = "Name", SortOrder: Any = "Ascending",
    NameContains: Any = None, CreationTimeAfter: Any = None, CreationTimeBefore: Any = None,
    LastModifiedTimeAfter: Any = None, LastModifiedTimeBefore: Any = None, StatusEquals: Any = None,
    **unsupported: Any,
) -> dict[str, Any]:
    refuse_unknown(unsupported, where="input")
    _check_given({"MaxResults": (Integer(1, 100), MaxResults),
                  "SortBy": (String(enum=("Name", "Status", "CreationTime")), SortBy),
                  "SortOrder": (String(enum=("Ascending", "Descending")), SortOrder),
                  "NameContains": (String(max=63), NameContains), "StatusEquals": (String(enum=tuning.STATUSES),
                                                                                   StatusEquals)})
    times = {key: epoch_s(value, key) if value is not None else None for key, value in (
        ("CreationTimeAfter", CreationTimeAfter), ("CreationTimeBefore", CreationTimeBefore),
        ("LastModifiedTimeAfter", LastModifiedTimeAfter), ("LastModifiedTimeBefore", LastModifiedTimeBefore))}
    descending = SortOrder == "Descending"
    fingerprint = request_fingerprint([StatusEquals, NameContains or None, *times.values(), SortBy, descending])
    after = keyset_place(NextToken, fingerprint, (_SORT_KINDS[SortBy], int))
    rows = store.tuning_jobs_after(after, MaxResults + 1, status=StatusEquals, name_contains=NameContains,
                                   created_after=times["CreationTimeAfter"], created_before=times["CreationTimeBefore"],
                                   modified_after=times["LastModifiedTimeAfter"],
                                   modified_before=times["LastModifiedTimeBefore"], sort_by=SortBy,
                                   descending=descending)
    page = [reap(store, row) for row in rows[:MaxResults]]
    orphans.reap_orphans(store)  # (once for the page's trials)
    summaries = []
    for row in page:
        trials = trial_summaries(store, row)
        jobs, goals = tuning.counters([s["TrainingJobStatus"] for s in trials], [_objective_value(s) for s in trials])
        fields = {"HyperParameterTuningJobName": row.name,
                  "HyperParameterTuningJobArn": row.doc["HyperParameterTuningJobArn"],
                  "HyperParameterTuningJobStatus": row.status,
                  "Strategy": row.doc["HyperParameterTuningJobConfig"]["Strategy"],
                  "CreationTime": row.creation_time, "LastModifiedTime": row.last_modified_time,
                  "TrainingJobStatusCounters": jobs, "ObjectiveStatusCounters": goals,
                  "ResourceLimits": row.doc["HyperParameterTuningJobConfig"]["ResourceLimits"]}
        if "HyperParameterTuningEndTime" in row.doc:
            fields["HyperParameterTuningEndTime"] = row.doc["HyperParameterTuningEndTime"]
        summaries.append(as_datetimes(fields))
    result: dict[str, Any] = {"HyperParameterTuningJobSummaries": summaries}
    if len(rows) > MaxResults:
        result["NextToken"] = keyset_token(place(page[-1], SortBy), fingerprint)
    return result


def _check_given(members: dict[str, tuple[Shape, Any]]) -> None:
    """The members given (not None), each checked against its shape."""
    given = {name: value for name, (_, value) in members.items() if value is not None}
    validate_members({name: members[name][0] for name in given}, given)


_TRIAL_ORDERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "Name": lambda s: s["TrainingJobName"], "CreationTime": lambda s: s["CreationTime"],
    "Status": lambda s: s["TrainingJobStatus"], "FinalObjectiveMetricValue": _objective_value,
}


def list_training_jobs_for_hyper_parameter_tuning_job(
    store: Store, *, HyperParameterTuningJobName: Any = None, NextToken: Any = None, MaxResults: Any = 10,
    StatusEquals: Any = None, SortBy: Any = "Name", SortOrder: Any = "Ascending", **unsupported: Any,
) -> dict[str, Any]:
    """The trials, sorted; sorted by their final objective, those without one are left out (as
    SageMaker does)."""
    refuse_unknown(unsupported, where="input")
    _check_given({"MaxResults": (Integer(1, 100), MaxResults), "SortBy": (String(enum=tuple(_TRIAL_ORDERS)), SortBy),
                  "SortOrder": (String(enum=("Ascending", "Descending")), SortOrder),
                  "StatusEquals": (String(enum=("InProgress", "Completed", "Failed", "Stopping", "Stopped",
                                                "Deleting")), StatusEquals)})
    row = tuning_job(store, HyperParameterTuningJobName)
    trials = [s for s in trial_summaries(store, row) if StatusEquals is None or s["TrainingJobStatus"] == StatusEquals]
    if SortBy == "FinalObjectiveMetricValue":
        trials = [s for s in trials if _objective_value(s) is not None]
    trials.sort(key=_TRIAL_ORDERS[SortBy], reverse=SortOrder == "Descending")
    page, token = offset_page(trials, NextToken, MaxResults)
    result: dict[str, Any] = {"TrainingJobSummaries": [as_datetimes(s) for s in page]}
    if token is not None:
        result["NextToken"] = token
    return result


def stop_hyper_parameter_tuning_job(store: Store, *, HyperParameterTuningJobName: Any = None,
                                    **unsupported: Any) -> dict[str, Any]:
    """InProgress -> Stopping: the tuner stops the trials that run, then the tuning job is Stopped."""
    refuse_unknown(unsupported, where="input")
    tuning_job(store, HyperParameterTuningJobName)

    def mutate(row: TuningRow) -> None:
        if row.status != "InProgress":
            raise ValidationException(f"The request was rejected because the tuning job is in status {row.status}.")
        row.last_modified_time = time.time()
        row.doc.update(HyperParameterTuningJobStatus="Stopping", LastModifiedTime=row.last_modified_time)

    store.update_tuning_job(HyperParameterTuningJobName, mutate)
    return {}


def delete_hyper_parameter_tuning_job(store: Store, *, HyperParameterTuningJobName: Any = None,
                                      **unsupported: Any) -> dict[str, Any]:
    """The tuning job is forgotten; its trials stay, as training jobs of their own."""
    refuse_unknown(unsupported, where="input")
    row = tuning_job(store, HyperParameterTuningJobName)
    if row.status in tuning.ACTIVE:
        raise ResourceInUse(f"Tuning job {row.name} is {row.status}; stop it before deleting it.")
    store.delete_tuning_job(row.name)
    return {}


OPERATIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "CreateHyperParameterTuningJob": create_hyper_parameter_tuning_job,
    "DescribeHyperParameterTuningJob": describe_hyper_parameter_tuning_job,
    "ListHyperParameterTuningJobs": list_hyper_parameter_tuning_jobs,
    "ListTrainingJobsForHyperParameterTuningJob": list_training_jobs_for_hyper_parameter_tuning_job,
    "StopHyperParameterTuningJob": stop_hyper_parameter_tuning_job,
    "DeleteHyperParameterTuningJob": delete_hyper_parameter_tuning_job,
}
