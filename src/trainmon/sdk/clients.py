"""boto3-shaped clients over the embedded store: ``trainmon.client("sagemaker")``, ``("logs")``.

Method names, parameters and response shapes are boto3's, so code written for boto3 changes
one line. Times come back as timezone-aware datetimes, as boto3 returns them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from .. import config, jobs
from ..errors import ResourceInUse, ResourceNotFound, TrainmonError, ValidationException, WaiterError
from ..parsing.framing import escape
from ..store import JobRow, Store, open_store

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
_TIME_FIELDS = ("CreationTime", "TrainingStartTime", "TrainingEndTime", "LastModifiedTime")


def _datetime(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


def _epoch(value: Any, field: str) -> float:
    if isinstance(value, datetime):
        return value.timestamp() if value.tzinfo else value.replace(tzinfo=UTC).timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ValidationException(f"{field} must be a datetime or epoch seconds.")


def with_datetimes(doc: dict[str, Any]) -> dict[str, Any]:
    """Epoch-second fields of a describe document as datetimes (boto3's types)."""
    out = dict(doc)
    for field in _TIME_FIELDS:
        if out.get(field) is not None:
            out[field] = _datetime(out[field])
    out["SecondaryStatusTransitions"] = [
        {k: _datetime(v) if k in ("StartTime", "EndTime") else v for k, v in t.items()}
        for t in doc.get("SecondaryStatusTransitions", [])
    ]
    out["FinalMetricDataList"] = [
        {**m, "Timestamp": _datetime(m["Timestamp"])} for m in doc.get("FinalMetricDataList", [])
    ]
    return out


class _Exceptions:
    ClientError = TrainmonError
    ValidationException = ValidationException
    ResourceInUse = ResourceInUse
    ResourceNotFound = ResourceNotFound


class _Client:
    exceptions = _Exceptions

    def __init__(self, store: Store | None = None, home: Path | None = None) -> None:
        self.home = home or (store.home if store else config.home())
        self.store = store or open_store(self.home)


class SageMakerClient(_Client):
    def create_training_job(self, **request: Any) -> dict[str, Any]:
        """Validate, record and start a job; a detached supervisor process runs it."""
        now = time.time()
        doc = jobs.build_job_doc(request, now)
        name = doc["TrainingJobName"]
        self.store.create_job(name, doc, now)
        log = (config.jobs_dir(self.home) / name)
        log.mkdir(parents=True, exist_ok=True)
        with open(log / "supervisor.log", "ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "trainmon.runtime.supervisor", name, "--home", str(self.home)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "TRAINMON_HOME": str(self.home),  # the supervisor opens this same store
                     config.DATABASE_URL_VARIABLE: self.store.database_url or ""},
            )
        threading.Thread(target=process.wait, name=f"trainmon-reap-{name}", daemon=True).start()  # no zombie
        try:
            identity = {"pid": process.pid, "create_time": psutil.Process(process.pid).create_time(),
                        "hostname": jobs.supervisor_identity()["hostname"], "pgids": []}
        except psutil.Error:
            identity = None

        def adopt(row: JobRow) -> None:
            if row.supervisor is None:
                row.supervisor = identity

        if identity is not None:
            self.store.update_job(name, adopt)
        return {"TrainingJobArn": doc["TrainingJobArn"]}

    def describe_training_job(self, TrainingJobName: str) -> dict[str, Any]:
        job = jobs.get_job(self.store, TrainingJobName)
        return with_datetimes(jobs.describe(self.store, job))

    def list_training_jobs(
        self,
        *,
        NextToken: str | None = None,
        MaxResults: int = 10,
        CreationTimeAfter: Any = None,
        CreationTimeBefore: Any = None,
        NameContains: str | None = None,
        StatusEquals: str | None = None,
        SortBy: str = "CreationTime",
        SortOrder: str = "Ascending",
        **unsupported: Any,
    ) -> dict[str, Any]:
        if unsupported:
            raise ValidationException(f"Unsupported parameter(s): {', '.join(sorted(unsupported))}.")
        if not 1 <= MaxResults <= 100:
            raise ValidationException("MaxResults must be from 1 to 100.")
        if SortBy not in ("Name", "CreationTime", "Status") or SortOrder not in ("Ascending", "Descending"):
            raise ValidationException("SortBy must be Name, CreationTime or Status; SortOrder Ascending or Descending.")
        jobs.reap_orphans(self.store)
        rows = self.store.list_jobs(
            status=StatusEquals,
            name_contains=NameContains,
            created_after=_epoch(CreationTimeAfter, "CreationTimeAfter") if CreationTimeAfter is not None else None,
            created_before=_epoch(CreationTimeBefore, "CreationTimeBefore") if CreationTimeBefore is not None else None,
            sort_by=SortBy,
            descending=SortOrder == "Descending",
        )
        start = int(NextToken) if NextToken and NextToken.isdigit() else 0
        page = rows[start:start + MaxResults]
        result: dict[str, Any] = {"TrainingJobSummaries": [_summary(row) for row in page]}
        if start + MaxResults < len(rows):
            result["NextToken"] = str(start + MaxResults)
        return result

    def stop_training_job(self, TrainingJobName: str) -> dict[str, Any]:
        jobs.get_job(self.store, TrainingJobName)
        jobs.request_stop(self.store, TrainingJobName)
        return {}

    def delete_training_job(self, TrainingJobName: str) -> dict[str, Any]:
        job = jobs.get_job(self.store, TrainingJobName)
        if job.status not in jobs.TERMINAL:
            raise ResourceInUse(f"Training job {TrainingJobName} is {job.status}; stop it before deleting it.")
        self.store.delete_job(TrainingJobName)
        shutil.rmtree(config.jobs_dir(self.home) / TrainingJobName, ignore_errors=True)  # frees the name fully
        return {}

    def get_waiter(self, name: str) -> _Waiter:
        if name != "training_job_completed_or_stopped":
            raise ValueError(f"Waiter {name} does not exist")
        return _Waiter(self)


class _Waiter:
    """``TrainingJobCompletedOrStopped``: success on Completed/Stopped, failure on Failed."""

    def __init__(self, client: SageMakerClient) -> None:
        self.client = client

    def wait(self, TrainingJobName: str, WaiterConfig: dict[str, Any] | None = None) -> None:
        settings = WaiterConfig or {}
        delay, attempts = float(settings.get("Delay", 120)), int(settings.get("MaxAttempts", 180))
        for _ in range(attempts):
            status = self.client.describe_training_job(TrainingJobName=TrainingJobName)["TrainingJobStatus"]
            if status in ("Completed", "Stopped"):
                return
            if status == "Failed":
                raise WaiterError(f"Waiter TrainingJobCompletedOrStopped failed: job {TrainingJobName} Failed")
            time.sleep(delay)
        raise WaiterError("Waiter TrainingJobCompletedOrStopped failed: Max attempts exceeded")


def _summary(row: JobRow) -> dict[str, Any]:
    summary = {
        "TrainingJobName": row.name,
        "TrainingJobArn": row.doc["TrainingJobArn"],
        "CreationTime": _datetime(row.creation_time),
        "TrainingJobStatus": row.status,
        "SecondaryStatus": row.doc.get("SecondaryStatus"),
        "LastModifiedTime": _datetime(row.last_modified_time),
    }
    if row.doc.get("TrainingEndTime") is not None:
        summary["TrainingEndTime"] = _datetime(row.doc["TrainingEndTime"])
    return summary


class LogsClient(_Client):
    """CloudWatch Logs' DescribeLogStreams and GetLogEvents over the job log streams."""

    def _check_group(self, group: str | None) -> None:
        if group != LOG_GROUP:
            raise TrainmonError("The specified log group does not exist.", code="ResourceNotFoundException")

    def describe_log_streams(
        self,
        *,
        logGroupName: str | None = None,
        logGroupIdentifier: str | None = None,
        logStreamNamePrefix: str | None = None,
        orderBy: str = "LogStreamName",
        descending: bool = False,
        nextToken: str | None = None,
        limit: int = 50,
    ) -> dict[str, Any]:
        if logGroupName and logGroupIdentifier:
            raise TrainmonError("Give logGroupName or logGroupIdentifier, not both.", code="InvalidParameterException")
        self._check_group(logGroupName or logGroupIdentifier)
        if orderBy not in ("LogStreamName", "LastEventTime"):
            raise TrainmonError("orderBy must be LogStreamName or LastEventTime.", code="InvalidParameterException")
        if logStreamNamePrefix and orderBy == "LastEventTime":
            raise TrainmonError("Cannot order by LastEventTime with a logStreamNamePrefix.",
                                code="InvalidParameterException")
        if not 1 <= limit <= 50:
            raise TrainmonError("limit must be from 1 to 50.", code="InvalidParameterException")
        streams = self.store.streams(prefix=logStreamNamePrefix)
        if orderBy == "LastEventTime":
            streams.sort(key=lambda s: s.last_event_ms or 0)
        if descending:
            streams.reverse()
        start = int(nextToken) if nextToken and nextToken.isdigit() else 0
        page = streams[start:start + limit]
        result: dict[str, Any] = {
            "logStreams": [
                {
                    "logStreamName": s.name,
                    "creationTime": s.creation_ms,
                    "firstEventTimestamp": s.first_event_ms,
                    "lastEventTimestamp": s.last_event_ms,
                    "lastIngestionTime": s.last_ingestion_ms,
                    "arn": f"arn:aws:logs:{jobs.REGION}:{jobs.ACCOUNT}:log-group:{LOG_GROUP}:log-stream:{s.name}",
                    "storedBytes": 0,
                }
                for s in page
            ]
        }
        if start + limit < len(streams):  # only when more remain: the SageMaker SDK loops on a stale token
            result["nextToken"] = str(start + limit)
        return result

    def get_log_events(
        self,
        *,
        logStreamName: str,
        logGroupName: str | None = None,
        logGroupIdentifier: str | None = None,
        startTime: int | None = None,
        endTime: int | None = None,
        nextToken: str | None = None,
        limit: int = 10_000,
        startFromHead: bool = False,
        unmask: bool = False,
    ) -> dict[str, Any]:
        self._check_group(logGroupName or logGroupIdentifier)
        stream = self.store.stream(logStreamName)
        if stream is None:
            raise TrainmonError("The specified log stream does not exist.", code="ResourceNotFoundException")
        if not 1 <= limit <= 10_000:
            raise TrainmonError("limit must be from 1 to 10000.", code="InvalidParameterException")
        forward = startFromHead
        after, before = -1, None
        if nextToken:
            direction, _, number = nextToken.partition("/")
            if direction not in ("f", "b") or not number.lstrip("-").isdigit():
                raise TrainmonError("The specified nextToken is invalid.", code="InvalidParameterException")
            forward = direction == "f"
            if forward:
                after = int(number)
            else:
                before = int(number)
        events = self.store.events(
            stream.id, after_seq=after, before_seq=before, start_ms=startTime, end_ms=endTime,
            limit=limit, newest_first=not forward,
        )
        if events:
            forward_token, backward_token = f"f/{events[-1].seq}", f"b/{events[0].seq}"
        else:  # at the end, the token passed comes back (never null)
            forward_token = nextToken if nextToken and forward else f"f/{after}"
            backward_token = nextToken if nextToken and not forward else f"b/{before if before is not None else 0}"
        return {
            "events": [{"timestamp": e.timestamp_ms, "message": escape(e.message), "ingestionTime": e.timestamp_ms}
                       for e in events],
            "nextForwardToken": forward_token,
            "nextBackwardToken": backward_token,
        }


def client(service: str, *, home: str | Path | None = None, store: Store | None = None) -> _Client:
    """``trainmon.client("sagemaker")`` or ``trainmon.client("logs")``, like ``boto3.client``."""
    root = Path(home).expanduser().resolve() if home is not None else None
    if service == "sagemaker":
        return SageMakerClient(store, root)
    if service == "logs":
        return LogsClient(store, root)
    if service == "cloudwatch":
        from ..api.cloudwatch import CloudWatchClient

        return CloudWatchClient(store or open_store(root))  # type: ignore[return-value]
    raise ValueError(f"Unknown service: {service!r}. Valid service names are: sagemaker, logs, cloudwatch")
