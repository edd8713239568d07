"""Training jobs: the CreateTrainingJob request, SageMaker's statuses, and the describe document.

Times inside trainmon are epoch seconds (floats); the client turns them into datetimes.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import time
from pathlib import Path
from typing import Any

import psutil

from . import config
from .errors import ResourceNotFound, StoreError, ValidationException
from .parsing.definitions import validate_definitions
from .parsing.framing import Mode
from .store import JobRow, Store, profiles

ACCOUNT = "000000000000"
REGION = "local"
JOB_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
ENV_KEY = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
CHANNEL_NAME = re.compile(r"[A-Za-z0-9\.\-_]+")
DEFAULT_MAX_RUNTIME_S = 86_400
MAX_RUNTIME_LIMIT_S = 28 * 86_400
DEFAULT_STOP_GRACE_S = 120.0
INPUT_MODES = ("Pipe", "File", "FastFile")

TERMINAL = ("Completed", "Failed", "Stopped")
ACTIVE = ("InProgress", "Stopping")
_PRIMARY = {
    "Starting": "InProgress",
    "Downloading": "InProgress",
    "Training": "InProgress",
    "Uploading": "InProgress",
    "Stopping": "Stopping",
    "Completed": "Completed",
    "Failed": "Failed",
    "Stopped": "Stopped",
    "MaxRuntimeExceeded": "Stopped",
}
MESSAGES = {
    "Starting": "Preparing the instances for training",
    "Downloading": "Preparing the input data channels",
    "Training": "Training in progress.",
    "Uploading": "Uploading generated training model",
    "Completed": "Training job completed",
    "Failed": "Training job failed",
    "Stopping": "Stopping the training job",
    "Stopped": "Training job stopped",
    "MaxRuntimeExceeded": "Training job stopped: it ran longer than MaxRuntimeInSeconds",
}
_REQUEST_FIELDS = {
    "TrainingJobName", "RoleArn", "AlgorithmSpecification", "HyperParameters", "InputDataConfig",
    "OutputDataConfig", "ResourceConfig", "StoppingCondition", "Environment", "Tags", "ProfilerConfig",
    "ProfilerRuleConfigurations", "DebugHookConfig", "DebugRuleConfigurations", "CheckpointConfig",
    "EnableNetworkIsolation", "EnableManagedSpotTraining", "EnableInterContainerTrafficEncryption",
    "ExperimentConfig", "VpcConfig", "RetryStrategy", "TensorBoardOutputConfig", "TrainmonConfig",
    "InfraCheckConfig", "RemoteDebugConfig", "SessionChainingConfig", "ServerlessJobConfig", "MlflowConfig",
    "ModelPackageConfig", "TrainingPlanArn",
}


def arn(name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name.lower()}"


def check_job_name(name: Any, field: str = "trainingJobName") -> str:
    if not isinstance(name, str) or not JOB_NAME.fullmatch(name):
        raise ValidationException(
            f"1 validation error detected: Value {name!r} at '{field}' failed to satisfy constraint: "
            "Member must satisfy regular expression pattern: ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62} "
            "(1 to 63 letters, digits and hyphens, starting with a letter or digit)."
        )
    return name


def _mapping(value: Any, field: str, *, max_items: int) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationException(f"{field} must be a map of string keys to string values.")
    if len(value) > max_items:
        raise ValidationException(f"{field} has {len(value)} entries; at most {max_items} are allowed.")
    return value


def _local_path(uri: str, field: str) -> Path:
    if uri.startswith("file://"):
        return Path(uri[len("file://"):])
    if "://" in uri:
        raise ValidationException(
            f"{field} {uri!r}: only local paths and file:// URIs are supported by this store; "
            "copy the data locally and give its path."
        )
    return Path(uri).expanduser().resolve()


def build_job_doc(request: dict[str, Any], now: float) -> dict[str, Any]:
    """Validate a CreateTrainingJob request and return the stored job document.

    botocore checks only types and minimums on the client; every maximum, pattern and enum is
    checked here, as SageMaker's server does.
    """
    unknown = sorted(set(request) - _REQUEST_FIELDS)
    if unknown:
        raise ValidationException(
            f"Unknown parameter(s) in input: {', '.join(unknown)}; must be among: {', '.join(sorted(_REQUEST_FIELDS))}."
        )
    name = check_job_name(request.get("TrainingJobName"))
    algorithm = dict(request.get("AlgorithmSpecification") or {})
    algorithm.setdefault("TrainingInputMode", "File")
    if algorithm["TrainingInputMode"] not in INPUT_MODES:
        raise ValidationException(f"TrainingInputMode must be one of {', '.join(INPUT_MODES)}.")
    definitions = validate_definitions(algorithm.get("MetricDefinitions") or [])
    algorithm["MetricDefinitions"] = [d.to_api() for d in definitions]
    command = resolve_command(algorithm)

    hyperparameters = _mapping(request.get("HyperParameters"), "HyperParameters", max_items=100)
    for key, value in hyperparameters.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValidationException(f"HyperParameters[{key!r}]: keys and values must be strings (SageMaker passes strings).")
        if len(key) > 256 or len(value) > 2500:
            raise ValidationException(f"HyperParameters[{key!r}]: keys hold at most 256 characters and values 2500.")
    environment = _mapping(request.get("Environment"), "Environment", max_items=100)
    for key, value in environment.items():
        if not isinstance(key, str) or not ENV_KEY.fullmatch(key) or len(key) > 512:
            raise ValidationException(f"Environment key {key!r} must match [a-zA-Z_][a-zA-Z0-9_]* (at most 512 characters).")
        if not isinstance(value, str) or len(value) > 512:
            raise ValidationException(f"Environment[{key!r}] must be a string of at most 512 characters.")

    resources = dict(request.get("ResourceConfig") or {})
    resources.setdefault("InstanceType", "local")
    resources.setdefault("InstanceCount", 1)
    resources.setdefault("VolumeSizeInGB", 0)
    count = resources["InstanceCount"]
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 64:
        raise ValidationException(f"ResourceConfig.InstanceCount must be an integer from 1 to 64, not {count!r}.")

    stopping = dict(request.get("StoppingCondition") or {})
    stopping.setdefault("MaxRuntimeInSeconds", DEFAULT_MAX_RUNTIME_S)
    runtime = stopping["MaxRuntimeInSeconds"]
    if not isinstance(runtime, int) or isinstance(runtime, bool) or not 1 <= runtime <= MAX_RUNTIME_LIMIT_S:
        raise ValidationException(
            f"StoppingCondition.MaxRuntimeInSeconds must be an integer from 1 to {MAX_RUNTIME_LIMIT_S} (28 days), not {runtime!r}."
        )

    output = dict(request.get("OutputDataConfig") or {})
    output.setdefault("S3OutputPath", config.output_dir().as_uri())
    output_path = _local_path(output["S3OutputPath"], "OutputDataConfig.S3OutputPath")

    channels = []
    for channel in request.get("InputDataConfig") or []:
        channel_name = channel.get("ChannelName") if isinstance(channel, dict) else None
        if not isinstance(channel_name, str) or not CHANNEL_NAME.fullmatch(channel_name) or len(channel_name) > 64:
            raise ValidationException(f"ChannelName {channel_name!r} must be 1-64 characters of [A-Za-z0-9.-_].")
        uri = channel.get("DataSource", {}).get("S3DataSource", {}).get("S3Uri")
        if not isinstance(uri, str):
            raise ValidationException(f"Channel {channel_name!r} needs DataSource.S3DataSource.S3Uri (a path or file:// URI).")
        path = _local_path(uri, f"Channel {channel_name!r}")
        if not path.exists():
            raise ValidationException(f"Channel {channel_name!r}: {path} does not exist.")
        channels.append(channel)
    if len({c["ChannelName"] for c in channels}) != len(channels):
        raise ValidationException("InputDataConfig: channel names must be unique.")

    extension = dict(request.get("TrainmonConfig") or {})
    mode = extension.setdefault("RecordMode", Mode.TERMINAL.value)
    if mode not in {m.value for m in Mode}:
        raise ValidationException(f"TrainmonConfig.RecordMode must be terminal, sagemaker or raw, not {mode!r}.")
    grace = extension.setdefault("StopGraceSeconds", DEFAULT_STOP_GRACE_S)
    if not isinstance(grace, (int, float)) or isinstance(grace, bool) or not 0 <= grace <= 3600:
        raise ValidationException("TrainmonConfig.StopGraceSeconds must be a number of seconds from 0 to 3600.")
    extension["Command"] = command
    workdir = extension.setdefault("WorkingDirectory", os.getcwd())
    if not isinstance(workdir, str) or not Path(workdir).is_dir():
        raise ValidationException(f"TrainmonConfig.WorkingDirectory {workdir!r} is not a directory.")

    doc: dict[str, Any] = {
        "TrainingJobName": name,
        "TrainingJobArn": arn(name),
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Starting",
        "AlgorithmSpecification": algorithm,
        "RoleArn": request.get("RoleArn") or f"arn:aws:iam::{ACCOUNT}:role/trainmon-local",
        "HyperParameters": dict(hyperparameters),
        "InputDataConfig": channels,
        "OutputDataConfig": output,
        "ResourceConfig": resources,
        "StoppingCondition": stopping,
        "Environment": dict(environment),
        "ModelArtifacts": {"S3ModelArtifacts": (output_path / name / "output" / "model.tar.gz").as_uri()},
        "CreationTime": now,
        "LastModifiedTime": now,
        "SecondaryStatusTransitions": [{"Status": "Starting", "StartTime": now, "StatusMessage": MESSAGES["Starting"]}],
        "EnableNetworkIsolation": bool(request.get("EnableNetworkIsolation", False)),
        "EnableInterContainerTrafficEncryption": bool(request.get("EnableInterContainerTrafficEncryption", False)),
        "EnableManagedSpotTraining": bool(request.get("EnableManagedSpotTraining", False)),
        "TrainmonConfig": extension,
    }
    doc["ProfilerConfig"] = _profiler_config(request.get("ProfilerConfig"))
    interval = extension.setdefault("SystemMetricsIntervalSeconds", 60)
    if not isinstance(interval, int) or isinstance(interval, bool) or not 1 <= interval <= 60:
        raise ValidationException("TrainmonConfig.SystemMetricsIntervalSeconds must be an integer from 1 to 60.")
    for optional in ("Tags", "CheckpointConfig", "DebugHookConfig", "ExperimentConfig"):
        if request.get(optional) is not None:
            doc[optional] = request[optional]
    return doc


def profiler_settings(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The job's ProfilerConfig when it profiles (interval and location filled in), else None."""
    settings = doc.get("ProfilerConfig", {})
    return None if settings.get("DisableProfiler", True) else settings


def _profiler_config(given: Any) -> dict[str, Any]:
    """ProfilerConfig with SageMaker's default (500 ms); the location is checked for writing now.

    Without the profiler extra (pyarrow) a job that did not ask for profiling runs without it.
    """
    if given is not None and not isinstance(given, dict):
        raise ValidationException("ProfilerConfig must be a structure.")
    settings = dict(given or {})
    if settings.get("DisableProfiler"):
        return {**settings, "DisableProfiler": True}
    settings["ProfilingIntervalInMilliseconds"] = profiles.check_interval(
        settings.get("ProfilingIntervalInMilliseconds", profiles.DEFAULT_INTERVAL_MS))
    settings.setdefault("S3OutputPath", profiles.default_location())
    settings["DisableProfiler"] = False
    if given is None and not profiles.available():
        return {"DisableProfiler": True}
    profiles.check_location(settings["S3OutputPath"])
    return settings


def resolve_command(algorithm: dict[str, Any]) -> list[str]:
    """The argv a host runs: ContainerEntrypoint + ContainerArguments, else the local "image".

    A local image is a directory holding an executable ``train`` (what a SageMaker training
    container runs) or a command line.
    """
    entrypoint = algorithm.get("ContainerEntrypoint")
    arguments = algorithm.get("ContainerArguments") or []
    for field, value in (("ContainerEntrypoint", entrypoint), ("ContainerArguments", arguments)):
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise ValidationException(f"AlgorithmSpecification.{field} must be a list of strings.")
    if entrypoint:
        return [*entrypoint, *arguments]
    image = algorithm.get("TrainingImage")
    if isinstance(image, str) and image.strip() and image != "local":
        path = Path(image).expanduser()
        if path.is_dir():
            train = path / "train"
            if not (train.is_file() and os.access(train, os.X_OK)):
                raise ValidationException(f"TrainingImage {image!r} is a directory without an executable 'train' file.")
            return [str(train.resolve()), *arguments]
        return [*shlex.split(image), *arguments]
    raise ValidationException(
        "Nothing to run: give AlgorithmSpecification.ContainerEntrypoint (a command as a list) or a TrainingImage "
        "(a command line, or a directory with an executable 'train')."
    )


# -- statuses ------------------------------------------------------------------------------


def transition(doc: dict[str, Any], status: str, now: float, message: str | None = None) -> None:
    """Enter a secondary status: close the open transition, open the new one, set the primary."""
    transitions = doc.setdefault("SecondaryStatusTransitions", [])
    if transitions and "EndTime" not in transitions[-1]:
        transitions[-1]["EndTime"] = now
    entry: dict[str, Any] = {"Status": status, "StartTime": now, "StatusMessage": message or MESSAGES[status]}
    primary = _PRIMARY[status]
    if primary in TERMINAL:
        entry["EndTime"] = now
        doc["TrainingEndTime"] = now
        start = doc.get("TrainingStartTime")
        if start is not None:
            seconds = max(1, int(now - start))
            doc["TrainingTimeInSeconds"] = seconds
            doc["BillableTimeInSeconds"] = seconds
    if status == "Downloading":
        doc["TrainingStartTime"] = now
    transitions.append(entry)
    doc["SecondaryStatus"] = status
    doc["TrainingJobStatus"] = primary
    doc["LastModifiedTime"] = now


def set_status(store: Store, name: str, status: str, message: str | None = None, **fields: Any) -> JobRow:
    def mutate(job: JobRow) -> None:
        now = time.time()
        current = job.doc["TrainingJobStatus"]
        if current in TERMINAL or (current == "Stopping" and _PRIMARY[status] == "InProgress"):
            return
        transition(job.doc, status, now, message)
        job.doc.update(fields)
        job.last_modified_time = now

    return store.update_job(name, mutate)


def request_stop(store: Store, name: str) -> JobRow:
    """StopTrainingJob: InProgress -> Stopping; the supervisor sees the request and stops the hosts."""

    def mutate(job: JobRow) -> None:
        status = job.doc["TrainingJobStatus"]
        if status != "InProgress":
            raise ValidationException(f"The request was rejected because the training job is in status {status}.")
        now = time.time()
        transition(job.doc, "Stopping", now)
        job.stop_requested = "Stopped"
        job.last_modified_time = now

    return store.update_job(name, mutate)


def get_job(store: Store, name: str) -> JobRow:
    check_job_name(name)
    reap_orphans(store)
    job = store.get_job(name)
    if job is None:
        raise ResourceNotFound.for_job(name)
    return job


def describe(store: Store, job: JobRow) -> dict[str, Any]:
    """The DescribeTrainingJob document (times as epoch seconds)."""
    doc = {k: v for k, v in job.doc.items() if k != "TrainmonConfig"}
    doc["FinalMetricDataList"] = [
        {"MetricName": name, "Value": value, "Timestamp": ts / 1000.0}
        for name, value, ts in store.final_metrics(job.id)
    ]
    doc["ProfilingStatus"] = "Enabled" if profiler_settings(doc) else "Disabled"
    return doc


# -- supervisors that died -----------------------------------------------------------------


def supervisor_identity() -> dict[str, Any]:
    me = psutil.Process()
    return {"pid": me.pid, "create_time": me.create_time(), "hostname": socket.gethostname(), "pgids": []}


def _alive(pid: int, create_time: float) -> bool:
    try:
        process = psutil.Process(pid)
        return abs(process.create_time() - create_time) < 1.0 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def reap_orphans(store: Store) -> list[str]:
    """Mark Failed every active job on this machine whose supervising process is gone."""
    reaped: list[str] = []
    hostname = socket.gethostname()
    try:
        active = store.list_jobs(statuses=ACTIVE)
    except StoreError:
        return reaped
    for job in active:
        supervisor = job.supervisor
        if not supervisor or supervisor.get("hostname") != hostname:
            continue
        if _alive(supervisor["pid"], supervisor["create_time"]):
            continue
        for pgid in supervisor.get("pgids", []):
            try:
                os.killpg(pgid, 9)
            except OSError:
                pass
        reason = (
            f"trainmon's supervising process (pid {supervisor['pid']}) ended without finishing the job: it was "
            "killed or crashed. Logs and metrics captured until then are kept; the job's processes were ended."
        )
        try:
            set_status(store, job.name, "Failed", FailureReason=reason)
        except StoreError:  # a full disk: reading must still work; the next command tries again
            continue
        reaped.append(job.name)
    return reaped
