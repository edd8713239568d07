"""SageMaker's training-job operations: CreateTrainingJob, DescribeTrainingJob, ListTrainingJobs,
StopTrainingJob, DeleteTrainingJob, a job's tags (AddTags, ListTags, DeleteTags, by its ARN), and
Search over training jobs: which runs match a SearchExpression (hyperparameters, final metrics,
tags, any field of the job), in any property's order, a page at a time. The expression is checked
and read by :mod:`trainmon.jobs.search` and run by the store as one query
(:mod:`trainmon.store.search`); each result is the job's DescribeTrainingJob fields, its final
metrics and its tags.

Each takes the store and the request's members as keyword arguments, named and shaped as in
boto3, and returns the response as boto3 would (times as timezone-aware datetimes). Errors carry
SageMaker's codes. Every operation that reads jobs first reaps the jobs of this machine whose
supervising process died (:func:`trainmon.runtime.job.orphans.reap_orphans`); one that reads a job
named, that job (:func:`~trainmon.runtime.job.orphans.reaped`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping
from typing import Any

from .. import config
from ..errors import ResourceInUse, ResourceNotFound, TrainmonError, ValidationException
from ..jobs.document import Description, SupervisorIdentity
from ..jobs.search import Search, read_request
from ..jobs.status import TERMINAL, description, transition
from ..runtime.job import orphans
from ..runtime.job.jobstate import set_status
from ..shapes import (
    Integer,
    ListOf,
    String,
    Structure,
    keyset_place,
    keyset_token,
    offset_page,
    refuse_unknown,
    request_fingerprint,
    validate_members,
)
from ..store import JobRow, Store
from ..store import search as store_search
from ..store.base import job_place
from . import tuning
from .times import as_datetimes, epoch_s
from .training_request import JOB_NAME_PATTERN, job_document

_JOB_NAME = String(1, 63, JOB_NAME_PATTERN, hint="1 to 63 letters, digits and hyphens, starting with a letter or digit")
STATUSES = ("InProgress", "Completed", "Failed", "Stopping", "Stopped")
"""TrainingJobStatus in SageMaker's order (its API reference's, the CLI's ``--status`` choices):
jobs.status's ACTIVE and TERMINAL."""
_SORT_KINDS = {"Name": str, "CreationTime": float, "Status": str}  # each SortBy's sort value, in a NextToken


def create_training_job(store: Store, **request: Any) -> dict[str, Any]:
    """Validate and record the job, and start its supervisor as a process of its own (it runs the
    hosts); returns at once, as SageMaker does."""
    return start_job(store, register_job(store, request))


def start_job(store: Store, job: JobRow) -> dict[str, Any]:
    """Start a stored job's supervisor as a process of its own; CreateTrainingJob's answer."""
    from ..runtime.job import detached

    try:
        detached.start(store, job.name)
    except OSError as exc:  # no process could be started: the job must not wait for one forever
        reason = f"InternalServerError: trainmon could not start the job's supervising process: {exc}"
        set_status(store, job.name, "Failed", FailureReason=reason)
        raise TrainmonError(reason) from None
    return {"TrainingJobArn": job.doc["TrainingJobArn"]}


def register_job(store: Store, request: Mapping[str, Any], supervisor: SupervisorIdentity | None = None, *,
                 tuning_job_arn: str | None = None) -> JobRow:
    """Validate a CreateTrainingJob request and store the job (Starting), starting nothing: the
    caller runs its supervisor (``supervisor`` is that process, when it is the caller itself).
    ``tuning_job_arn``: the hyperparameter tuning job the job is a trial of."""
    now = time.time()
    doc = job_document(request, now, home=store.home, database_url=store.database_url)
    if tuning_job_arn is not None:
        doc["TuningJobArn"] = tuning_job_arn
    return store.create_job(doc["TrainingJobName"], doc, now, supervisor=supervisor)


def describe_training_job(store: Store, *, TrainingJobName: Any = None, **unsupported: Any) -> dict[str, Any]:
    refuse_unknown(unsupported, where="input")
    return as_datetimes(describe(store, job(store, TrainingJobName)))


def describe(store: Store, row: JobRow, finals: list[tuple[str, float, int]] | None = None) -> Description:
    """DescribeTrainingJob's answer for a job (times as epoch seconds); ``finals``: its final
    metrics as the store's ``final_metrics`` gives them, when they were read already (a page of jobs)."""
    found = store.final_metrics(row.id) if finals is None else finals
    return description(row.doc, [{"MetricName": name, "Value": value, "Timestamp": ts / 1000.0}
                                 for name, value, ts in found])


def list_training_jobs(
    store: Store,
    *,
    NextToken: Any = None,
    MaxResults: Any = 10,
    CreationTimeAfter: Any = None,
    CreationTimeBefore: Any = None,
    NameContains: Any = None,
    StatusEquals: Any = None,
    SortBy: Any = "CreationTime",
    SortOrder: Any = "Ascending",
    **unsupported: Any,
) -> dict[str, Any]:
    page, token = list_training_job_rows(
        store, NextToken=NextToken, MaxResults=MaxResults, CreationTimeAfter=CreationTimeAfter,
        CreationTimeBefore=CreationTimeBefore, NameContains=NameContains, StatusEquals=StatusEquals, SortBy=SortBy,
        SortOrder=SortOrder, **unsupported)
    result: dict[str, Any] = {"TrainingJobSummaries": [summary(row) for row in page]}
    if token is not None:
        result["NextToken"] = token
    return result


def list_training_job_rows(store: Store, *, NextToken: Any = None, MaxResults: Any = 10, CreationTimeAfter: Any = None,
                           CreationTimeBefore: Any = None, NameContains: Any = None, StatusEquals: Any = None,
                           SortBy: Any = "CreationTime", SortOrder: Any = "Ascending",
                           **unsupported: Any) -> tuple[list[JobRow], str | None]:
    """ListTrainingJobs' page as the jobs' rows, and the NextToken (None: the last page)."""
    refuse_unknown(unsupported, where="input")
    if not isinstance(MaxResults, int) or isinstance(MaxResults, bool) or not 1 <= MaxResults <= 100:
        raise ValidationException("MaxResults must be from 1 to 100.")
    if SortBy not in ("Name", "CreationTime", "Status") or SortOrder not in ("Ascending", "Descending"):
        raise ValidationException("SortBy must be Name, CreationTime or Status; SortOrder Ascending or Descending.")
    if StatusEquals is not None and StatusEquals not in STATUSES:
        raise ValidationException(f"StatusEquals must be one of {', '.join(STATUSES)}.")
    if NameContains is not None and not isinstance(NameContains, str):
        raise ValidationException("NameContains must be a string.")
    after_s = epoch_s(CreationTimeAfter, "CreationTimeAfter") if CreationTimeAfter is not None else None
    before_s = epoch_s(CreationTimeBefore, "CreationTimeBefore") if CreationTimeBefore is not None else None
    descending = SortOrder == "Descending"
    fingerprint = request_fingerprint([StatusEquals, NameContains or None, after_s, before_s, SortBy, descending])
    place = keyset_place(NextToken, fingerprint, (_SORT_KINDS[SortBy], int))
    orphans.reap_orphans(store)
    rows = store.jobs_after(place, MaxResults + 1, status=StatusEquals, name_contains=NameContains,
                            created_after=after_s, created_before=before_s, sort_by=SortBy, descending=descending)
    page = rows[:MaxResults]  # (and one more: whether any remain; the SageMaker SDK loops on a stale token)
    return page, keyset_token(job_place(page[-1], SortBy), fingerprint) if len(rows) > MaxResults else None


def summary(row: JobRow) -> dict[str, Any]:
    """A job as ListTrainingJobs summarises it."""
    doc = row.doc
    fields: dict[str, Any] = {
        "TrainingJobName": row.name,
        "TrainingJobArn": doc["TrainingJobArn"],
        "CreationTime": row.creation_time,
        "TrainingJobStatus": row.status,
        "SecondaryStatus": doc["SecondaryStatus"],
        "LastModifiedTime": row.last_modified_time,
    }
    if "TrainingEndTime" in doc:
        fields["TrainingEndTime"] = doc["TrainingEndTime"]
    return as_datetimes(fields)


def stop_training_job(store: Store, *, TrainingJobName: Any = None, **unsupported: Any) -> dict[str, Any]:
    """InProgress -> Stopping; the job's supervisor sees the request and stops the hosts."""
    refuse_unknown(unsupported, where="input")
    job(store, TrainingJobName)
    request_stop(store, TrainingJobName)
    return {}


def request_stop(store: Store, name: str, message: str | None = None) -> None:
    """InProgress -> Stopping, ``message`` saying why in the job's status transitions (a tuning
    job's early stop); ValidationException when the job is not InProgress."""

    def mutate(row: JobRow) -> None:
        status = row.doc["TrainingJobStatus"]
        if status != "InProgress":
            raise ValidationException(f"The request was rejected because the training job is in status {status}.")
        now = time.time()
        transition(row.doc, "Stopping", now, message)
        row.stop_requested = "Stopped"
        row.last_modified_time = now

    store.update_job(name, mutate)


def delete_training_job(store: Store, *, TrainingJobName: Any = None, **unsupported: Any) -> dict[str, Any]:
    refuse_unknown(unsupported, where="input")
    row = job(store, TrainingJobName)
    if row.status not in TERMINAL:
        raise ResourceInUse(f"Training job {TrainingJobName} is {row.status}; stop it before deleting it.")
    store.delete_job(TrainingJobName)
    shutil.rmtree(config.job_dir(store.home, TrainingJobName), ignore_errors=True)  # frees the name fully
    return {}


_TAG = Structure({"Key": String(1, 128), "Value": String(max=256)}, required=("Key", "Value"))
MAX_TAGS = 50


def add_tags(store: Store, *, ResourceArn: Any = None, Tags: Any = None, **unsupported: Any) -> dict[str, Any]:
    """Tags added to a job, a tag of the same key replaced; ``Tags`` answers every tag it now has."""
    refuse_unknown(unsupported, where="input")
    validate_members({"ResourceArn": _ARN, "Tags": ListOf(_TAG, 0, MAX_TAGS)},
                     {"ResourceArn": ResourceArn, "Tags": Tags})
    name = _job_of_arn(store, ResourceArn).name

    def mutate(row: JobRow) -> None:
        tags = {tag["Key"]: tag["Value"] for tag in row.doc.get("Tags", [])}
        tags.update((tag["Key"], tag["Value"]) for tag in Tags)
        if len(tags) > MAX_TAGS:
            raise ValidationException(f"A resource may have at most {MAX_TAGS} tags; this one would have {len(tags)}.")
        row.doc["Tags"] = [{"Key": key, "Value": value} for key, value in tags.items()]

    return {"Tags": store.update_job(name, mutate).doc["Tags"]}


def list_tags(store: Store, *, ResourceArn: Any = None, NextToken: Any = None, MaxResults: Any = 50,
              **unsupported: Any) -> dict[str, Any]:
    refuse_unknown(unsupported, where="input")
    validate_members({"ResourceArn": _ARN, "MaxResults": Integer(50, 10000)},
                     {"ResourceArn": ResourceArn, "MaxResults": MaxResults})
    page, token = offset_page(_job_of_arn(store, ResourceArn).doc.get("Tags", []), NextToken, MaxResults)
    return {"Tags": page, **({"NextToken": token} if token is not None else {})}


def delete_tags(store: Store, *, ResourceArn: Any = None, TagKeys: Any = None, **unsupported: Any) -> dict[str, Any]:
    refuse_unknown(unsupported, where="input")
    validate_members({"ResourceArn": _ARN, "TagKeys": ListOf(String(1, 128), 1, MAX_TAGS)},
                     {"ResourceArn": ResourceArn, "TagKeys": TagKeys})
    name = _job_of_arn(store, ResourceArn).name
    gone = set(TagKeys)

    def mutate(row: JobRow) -> None:
        row.doc["Tags"] = [tag for tag in row.doc.get("Tags", []) if tag["Key"] not in gone]

    store.update_job(name, mutate)
    return {}


_ARN = String(1, 256, r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:.+")


def _job_of_arn(store: Store, arn: str) -> JobRow:
    """The training job an ARN names (trainmon's resources with tags are training jobs)."""
    kind, _, name = arn.split(":", 5)[-1].partition("/")
    if kind != "training-job" or not name:
        raise ValidationException(f"{arn} is not the ARN of a training job (…:training-job/NAME): trainmon keeps "
                                  "tags on training jobs only.")
    row = next((row for row in store.list_jobs() if row.doc.get("TrainingJobArn") == arn), None)
    if row is None:
        raise ResourceNotFound(f"Resource {arn} not found.")
    return row


def job(store: Store, name: Any) -> JobRow:
    """The job of that name (reaped first if it is an orphan); SageMaker's answer when there is none."""
    validate_members({"TrainingJobName": _JOB_NAME}, {"TrainingJobName": name})
    return orphans.reaped(store, _existing(store, name))


def each_job(store: Store, names: list[str], answer: Callable[[JobRow], dict[str, Any]]) -> list[dict[str, Any]]:
    """Of each job named, in order, ``TrainingJobName`` with ``answer(job)``'s fields, or as ``Error``
    what :func:`job` would raise for it alone (an invalid name, no such job): what Compare asks of
    several jobs at once, their rows read in one query and orphans reaped once. A store that fails,
    fails the whole."""
    orphans.reap_orphans(store)
    invalid: dict[str, ValidationException] = {}
    for name in names:
        try:
            validate_members({"TrainingJobName": _JOB_NAME}, {"TrainingJobName": name})
        except ValidationException as exc:
            invalid[name] = exc
    rows = {row.name: row for row in store.jobs_named([name for name in names if name not in invalid])}
    found: list[dict[str, Any]] = []
    for name in names:
        row = rows.get(name)
        if row is None:
            error = invalid.get(name) or ResourceNotFound.for_job(name)
            found.append({"TrainingJobName": name, "Error": error.brief})
        else:
            found.append({"TrainingJobName": name, **answer(row)})
    return found


def _existing(store: Store, name: str) -> JobRow:
    row = store.get_job(name)
    if row is None:
        raise ResourceNotFound.for_job(name)
    return row


# -- Search


def search(store: Store, *, Resource: Any = None, SearchExpression: Any = None, SortBy: Any = None,
           SortOrder: Any = None, NextToken: Any = None, MaxResults: Any = None, CrossAccountFilterOption: Any = None,
           VisibilityConditions: Any = None, **unsupported: Any) -> dict[str, Any]:
    refuse_unknown(unsupported, where="input")
    del CrossAccountFilterOption, VisibilityConditions  # (one account: nothing is shared from another)
    request, size, offset, fingerprint = _search_request(Resource, SearchExpression, SortBy, SortOrder, NextToken,
                                                         MaxResults)
    if Resource == "HyperParameterTuningJob":
        entities, total = tuning.search_entities(store, request, offset, size + 1)
        results = [{"HyperParameterTuningJob": entity} for entity in entities[:size]]
        more = len(entities) > size
    else:
        page, total, token = search_rows(store, Resource=Resource, SearchExpression=SearchExpression, SortBy=SortBy,
                                         SortOrder=SortOrder, NextToken=NextToken, MaxResults=MaxResults)
        finals = store.final_metrics_of([row.id for row in page])  # one read for the page
        results = [{"TrainingJob": training_job(store, row, finals.get(row.id, []))} for row in page]
        more = token is not None
    result: dict[str, Any] = {"Results": results, "TotalHits": total_hits(total)}
    if more:
        result["NextToken"] = keyset_token([offset + size], fingerprint)
    return result


def _search_request(Resource: Any, SearchExpression: Any, SortBy: Any, SortOrder: Any, NextToken: Any,
                    MaxResults: Any) -> tuple[Search, int, int, str]:
    """A Search request checked: its expression and order, its page's size and offset, and the
    fingerprint its NextToken carries."""
    request = read_request(Resource, SearchExpression, SortBy, SortOrder)
    size = 10 if MaxResults is None else MaxResults
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= 100:
        raise ValidationException(f"1 validation error detected: Value '{MaxResults}' at 'maxResults' failed to "
                                  "satisfy constraint: Member must have value between 1 and 100")
    fingerprint = request_fingerprint([Resource, SearchExpression, request.sort_by, request.descending])
    place = keyset_place(NextToken, fingerprint, (int,))
    return request, size, place[0] if place else 0, fingerprint


def search_rows(store: Store, *, Resource: Any = "TrainingJob", SearchExpression: Any = None, SortBy: Any = None,
                SortOrder: Any = None, NextToken: Any = None,
                MaxResults: Any = None) -> tuple[list[JobRow], int, str | None]:
    """A Search's page of training jobs as their rows, how many match (the store's count: beyond
    COUNTED, more than COUNTED), and the NextToken (None: the last page)."""
    request, size, offset, fingerprint = _search_request(Resource, SearchExpression, SortBy, SortOrder, NextToken,
                                                         MaxResults)
    orphans.reap_orphans(store)
    rows, total = store.search_jobs(request, offset, size + 1)  # (and one more: whether any remain)
    page = rows[:size]
    return page, total, keyset_token([offset + size], fingerprint) if len(rows) > size else None


def total_hits(total: int) -> dict[str, Any]:
    """TotalHits of a count the store made: exact up to COUNTED, a lower bound beyond."""
    if total > store_search.COUNTED:
        return {"Value": store_search.COUNTED, "Relation": "GreaterThanOrEqualTo"}
    return {"Value": total, "Relation": "EqualTo"}


def training_job(store: Store, row: JobRow, finals: list[tuple[str, float, int]]) -> dict[str, Any]:
    """A job as Search's TrainingJob: its description with its final metrics (read for the page)
    and its tags."""
    answer = as_datetimes(describe(store, row, finals))
    answer.pop("ProfilingStatus", None)  # (not a member of Search's TrainingJob)
    answer.setdefault("Tags", [])
    return answer


OPERATIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "CreateTrainingJob": create_training_job,
    "DescribeTrainingJob": describe_training_job,
    "ListTrainingJobs": list_training_jobs,
    "StopTrainingJob": stop_training_job,
    "DeleteTrainingJob": delete_training_job,
    "AddTags": add_tags,
    "ListTags": list_tags,
    "DeleteTags": delete_tags,
    "Search": search,
}
