"""The CreateTrainingJob request: its shape, and the job document a valid one becomes.

Every field is checked before anything is stored or started (:data:`SHAPE`, AWS's limits and
patterns, plus what running the job locally needs: paths that exist, strings a process can
receive). Fields trainmon does not act on (VpcConfig, RetryStrategy, ...) are checked for their
members and kept in the document as given, as SageMaker echoes them.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from .. import config
from ..errors import ValidationException
from ..jobs.document import (
    ACCOUNT,
    AlgorithmSpecification,
    Channel,
    JobDocument,
    ProfilerConfig,
    TrainmonConfig,
    arn,
)
from ..jobs.status import MESSAGES
from ..parsing.definitions import validate_definitions
from ..parsing.framing import Mode
from ..store import profiles
from .shapes import Boolean, Integer, Json, ListOf, MapOf, Number, String, Structure, validate

JOB_NAME_PATTERN = r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
DEFAULT_MAX_RUNTIME_S = 86_400
MAX_RUNTIME_LIMIT_S = 28 * 86_400
DEFAULT_STOP_GRACE_S = 120.0
MAX_INSTANCES = 64
MAX_HYPERPARAMETER_JSON_BYTES = 100_000  # SM_HPS holds them all; Linux caps one variable at 128 KiB

_S3_URI = String(max=1024)
_LOCAL_PATH = String(max=4096, to_process=True)
_RULE = Structure({
    "RuleConfigurationName": String(1, 256), "LocalPath": _LOCAL_PATH, "S3OutputPath": _S3_URI,
    "RuleEvaluatorImage": String(max=255), "InstanceType": String(max=64), "VolumeSizeInGB": Integer(min=0),
    "RuleParameters": MapOf(String(1, 256), String(max=256), max=100),
}, required=("RuleConfigurationName", "RuleEvaluatorImage"))

SHAPE = Structure({
    "TrainingJobName": String(1, 63, JOB_NAME_PATTERN,
                              hint="1 to 63 letters, digits and hyphens, starting with a letter or digit"),
    "RoleArn": String(1, 2048),
    "AlgorithmSpecification": Structure({
        "TrainingImage": String(max=255, to_process=True),
        "AlgorithmName": String(1, 170),
        "TrainingInputMode": String(enum=("Pipe", "File", "FastFile")),
        "MetricDefinitions": Json(),  # validate_definitions says more than a shape could
        "EnableSageMakerMetricsTimeSeries": Boolean(),
        "ContainerEntrypoint": ListOf(String(max=256, to_process=True), 1, 100),
        "ContainerArguments": ListOf(String(max=256, to_process=True), 1, 100),
        "TrainingImageConfig": Json(),
    }),
    "HyperParameters": MapOf(
        String(max=256, pattern=r"[^=\x00]*", hint="a hyperparameter's name becomes the variable SM_HP_<NAME>: "
               "no '=' or NUL"),
        String(max=2500, to_process=True, hint="HyperParameters are passed to the job as strings: give \"0.1\", "
               "not 0.1"),
        max=100),
    "InputDataConfig": ListOf(Structure({
        "ChannelName": String(1, 64, r"[A-Za-z0-9\.\-_]+"),
        "DataSource": Structure({
            "S3DataSource": Structure({
                "S3DataType": String(enum=("ManifestFile", "S3Prefix", "AugmentedManifestFile", "Converse")),
                "S3Uri": String(max=1024, to_process=True),
                "S3DataDistributionType": String(enum=("FullyReplicated", "ShardedByS3Key")),
                "AttributeNames": Json(), "InstanceGroupNames": Json(), "ModelAccessConfig": Json(),
                "HubAccessConfig": Json(),
            }, required=("S3Uri",)),
            "FileSystemDataSource": Json(),
        }),
        "ContentType": String(max=256), "CompressionType": String(enum=("None", "Gzip")),
        "RecordWrapperType": String(enum=("None", "RecordIO")),
        "InputMode": String(enum=("Pipe", "File", "FastFile")), "ShuffleConfig": Json(),
    }, required=("ChannelName", "DataSource")), 1, 20),
    "OutputDataConfig": Structure({
        "KmsKeyId": String(max=2048), "S3OutputPath": String(max=1024, to_process=True),
        "CompressionType": String(enum=("GZIP", "NONE")),
    }, required=("S3OutputPath",)),
    "ResourceConfig": Structure({
        "InstanceType": String(1, 64),
        "InstanceCount": Integer(1, MAX_INSTANCES, hint=f"hosts algo-1 to algo-N: from 1 to {MAX_INSTANCES}"),
        "VolumeSizeInGB": Integer(min=0), "VolumeKmsKeyId": String(max=2048),
        "KeepAlivePeriodInSeconds": Integer(0, 21600), "InstanceGroups": Json(), "TrainingPlanArn": String(max=2048),
        "InstancePlacementConfig": Json(),
    }),
    "VpcConfig": Structure({"SecurityGroupIds": ListOf(String(max=32), 1, 5), "Subnets": ListOf(String(max=32), 1, 16)},
                           required=("SecurityGroupIds", "Subnets")),
    "StoppingCondition": Structure({
        "MaxRuntimeInSeconds": Integer(1, MAX_RUNTIME_LIMIT_S, hint="StoppingCondition.MaxRuntimeInSeconds must be "
                                       f"an integer from 1 to {MAX_RUNTIME_LIMIT_S} (28 days)"),
        "MaxWaitTimeInSeconds": Integer(min=1), "MaxPendingTimeInSeconds": Integer(7200, 2419200),
    }),
    "Tags": ListOf(Structure({"Key": String(1, 128), "Value": String(max=256)}, required=("Key", "Value")), 0, 50),
    "EnableNetworkIsolation": Boolean(),
    "EnableInterContainerTrafficEncryption": Boolean(),
    "EnableManagedSpotTraining": Boolean(),
    "CheckpointConfig": Structure({"S3Uri": _S3_URI, "LocalPath": _LOCAL_PATH}, required=("S3Uri",)),
    "DebugHookConfig": Structure({
        "LocalPath": _LOCAL_PATH, "S3OutputPath": _S3_URI, "HookParameters": MapOf(String(1, 256), String(max=256), 20),
        "CollectionConfigurations": Json(),
    }, required=("S3OutputPath",)),
    "DebugRuleConfigurations": ListOf(_RULE, 0, 20),
    "TensorBoardOutputConfig": Structure({"LocalPath": _LOCAL_PATH, "S3OutputPath": _S3_URI},
                                         required=("S3OutputPath",)),
    "ExperimentConfig": Structure({name: String(1, 120) for name in (
        "ExperimentName", "TrialName", "TrialComponentDisplayName", "RunName")}),
    "ProfilerConfig": Structure({
        "S3OutputPath": String(max=1024, to_process=True),
        "ProfilingIntervalInMilliseconds": Integer(allowed=profiles.ALLOWED_INTERVALS_MS, hint=(
            f"use one of {', '.join(map(str, profiles.ALLOWED_INTERVALS_MS))} (default {profiles.DEFAULT_INTERVAL_MS})")),
        "ProfilingParameters": MapOf(String(1, 256), String(max=256), 20),
        "DisableProfiler": Boolean(),
    }),
    "ProfilerRuleConfigurations": ListOf(_RULE, 0, 20),
    "Environment": MapOf(String(max=512, pattern=r"[a-zA-Z_][a-zA-Z0-9_]*"), String(max=512, to_process=True),
                         max=100),
    "RetryStrategy": Structure({"MaximumRetryAttempts": Integer(1, 30)}, required=("MaximumRetryAttempts",)),
    "RemoteDebugConfig": Structure({"EnableRemoteDebug": Boolean()}),
    "InfraCheckConfig": Structure({"EnableInfraCheck": Boolean()}),
    "SessionChainingConfig": Structure({"EnableSessionTagChaining": Boolean()}),
    "ServerlessJobConfig": Json(),
    "MlflowConfig": Json(),
    "ModelPackageConfig": Json(),
    "TrainingPlanArn": String(max=2048),
    "TrainmonConfig": Structure({
        "RecordMode": String(enum=tuple(m.value for m in Mode)),
        "StopGraceSeconds": Number(0, 3600, hint="seconds between SIGTERM and SIGKILL when the job stops"),
        "WorkingDirectory": String(1, 4096, to_process=True),
        "SystemMetricsIntervalSeconds": Integer(1, 60),
    }),
}, required=("TrainingJobName",))

_KEPT_AS_GIVEN = ("Tags", "VpcConfig", "CheckpointConfig", "DebugHookConfig", "DebugRuleConfigurations",
                  "TensorBoardOutputConfig", "ExperimentConfig", "ProfilerRuleConfigurations", "RetryStrategy",
                  "RemoteDebugConfig", "InfraCheckConfig", "SessionChainingConfig", "ServerlessJobConfig",
                  "MlflowConfig", "ModelPackageConfig", "TrainingPlanArn")


def job_document(request: Mapping[str, Any], now: float) -> JobDocument:
    """A valid CreateTrainingJob request as the job document to store (ValidationException otherwise)."""
    checked = validate(SHAPE, request)
    name: str = checked["TrainingJobName"]
    algorithm = _algorithm(checked.get("AlgorithmSpecification", {}))
    hyperparameters: dict[str, str] = checked.get("HyperParameters", {})
    if len(json.dumps(hyperparameters)) > MAX_HYPERPARAMETER_JSON_BYTES:
        raise ValidationException(f"HyperParameters take more than {MAX_HYPERPARAMETER_JSON_BYTES} bytes as JSON: "
                                  "the job receives them all in one environment variable (SM_HPS); pass large "
                                  "values in a file through an input channel instead.")
    output = {"S3OutputPath": config.output_dir().as_uri(), **checked.get("OutputDataConfig", {})}
    output_path = _local_path(output["S3OutputPath"], "OutputDataConfig.S3OutputPath")
    doc: dict[str, Any] = {
        "TrainingJobName": name,
        "TrainingJobArn": arn(name),
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Starting",
        "AlgorithmSpecification": algorithm,
        "RoleArn": checked.get("RoleArn") or f"arn:aws:iam::{ACCOUNT}:role/trainmon-local",
        "HyperParameters": hyperparameters,
        "InputDataConfig": _channels(checked.get("InputDataConfig", [])),
        "OutputDataConfig": output,
        "ResourceConfig": {"InstanceType": "local", "InstanceCount": 1, "VolumeSizeInGB": 0,
                           **checked.get("ResourceConfig", {})},
        "StoppingCondition": {"MaxRuntimeInSeconds": DEFAULT_MAX_RUNTIME_S, **checked.get("StoppingCondition", {})},
        "Environment": checked.get("Environment", {}),
        "ModelArtifacts": {"S3ModelArtifacts": (output_path / name / "output" / "model.tar.gz").as_uri()},
        "CreationTime": now,
        "LastModifiedTime": now,
        "SecondaryStatusTransitions": [{"Status": "Starting", "StartTime": now, "StatusMessage": MESSAGES["Starting"]}],
        "EnableNetworkIsolation": checked.get("EnableNetworkIsolation", False),
        "EnableInterContainerTrafficEncryption": checked.get("EnableInterContainerTrafficEncryption", False),
        "EnableManagedSpotTraining": checked.get("EnableManagedSpotTraining", False),
        "ProfilerConfig": _profiler_config(checked.get("ProfilerConfig")),
        "TrainmonConfig": _trainmon_config(checked.get("TrainmonConfig", {}), resolve_command(algorithm)),
    }
    doc.update({field: checked[field] for field in _KEPT_AS_GIVEN if field in checked})
    return cast(JobDocument, doc)


def _algorithm(given: dict[str, Any]) -> AlgorithmSpecification:
    algorithm = cast(AlgorithmSpecification, {"TrainingInputMode": "File", **given})
    definitions = validate_definitions(given.get("MetricDefinitions") or [])
    algorithm["MetricDefinitions"] = [{"Name": d.name, "Regex": d.regex} for d in definitions]
    return algorithm


def _channels(channels: list[Channel]) -> list[Channel]:
    names = [channel["ChannelName"] for channel in channels]
    for name in names:
        if name in (".", ".."):
            raise ValidationException(f"ChannelName {name!r} is a path component, not a name: it would become the "
                                      f"directory input/data/{name}; choose a name with a letter or digit.")
    if len(set(names)) != len(names):
        raise ValidationException("InputDataConfig: channel names must be unique.")
    for channel in channels:
        source = channel["DataSource"].get("S3DataSource")
        if source is None:
            raise ValidationException(f"Channel {channel['ChannelName']!r} needs DataSource.S3DataSource.S3Uri "
                                      "(a path or file:// URI).")
        path = _local_path(source["S3Uri"], f"Channel {channel['ChannelName']!r}")
        if not path.exists():
            raise ValidationException(f"Channel {channel['ChannelName']!r}: {path} does not exist.")
    return channels


def _local_path(uri: str, field: str) -> Path:
    if uri.startswith("file://"):
        return Path(uri[len("file://"):])
    if "://" in uri:
        raise ValidationException(
            f"{field} {uri!r}: only local paths and file:// URIs are supported by this store; "
            "copy the data locally and give its path."
        )
    return Path(uri).expanduser().resolve()


def _trainmon_config(given: dict[str, Any], command: list[str]) -> TrainmonConfig:
    settings: TrainmonConfig = {
        "Command": command,
        "RecordMode": given.get("RecordMode", Mode.TERMINAL.value),
        "StopGraceSeconds": given.get("StopGraceSeconds", DEFAULT_STOP_GRACE_S),
        "WorkingDirectory": given.get("WorkingDirectory") or os.getcwd(),
        "SystemMetricsIntervalSeconds": given.get("SystemMetricsIntervalSeconds", 60),
    }
    if not Path(settings["WorkingDirectory"]).is_dir():
        raise ValidationException(f"TrainmonConfig.WorkingDirectory {settings['WorkingDirectory']!r} is not a "
                                  "directory.")
    return settings


def _profiler_config(given: dict[str, Any] | None) -> ProfilerConfig:
    """ProfilerConfig with SageMaker's default (500 ms); the location is checked for writing now.

    Without the profiler extra (pyarrow) a job that did not ask for profiling runs without it.
    """
    if given is not None and given.get("DisableProfiler"):
        return cast(ProfilerConfig, {**given, "DisableProfiler": True})
    if given is None and not profiles.available():
        return {"DisableProfiler": True}
    settings = cast(ProfilerConfig, {
        "ProfilingIntervalInMilliseconds": profiles.DEFAULT_INTERVAL_MS, "S3OutputPath": profiles.default_location(),
        **(given or {}), "DisableProfiler": False})
    profiles.check_location(settings["S3OutputPath"])
    return settings


def resolve_command(algorithm: AlgorithmSpecification) -> list[str]:
    """The argv a host runs: ContainerEntrypoint + ContainerArguments, else the local "image".

    A local image is a directory holding an executable ``train`` (what a SageMaker training
    container runs) or a command line.
    """
    arguments = algorithm.get("ContainerArguments", [])
    entrypoint = algorithm.get("ContainerEntrypoint")
    if entrypoint:
        return [*entrypoint, *arguments]
    image = algorithm.get("TrainingImage", "")
    if image.strip() and image != "local":
        path = Path(image).expanduser()
        if path.is_dir():
            train = path / "train"
            if not (train.is_file() and os.access(train, os.X_OK)):
                raise ValidationException(f"TrainingImage {image!r} is a directory without an executable 'train' file.")
            return [str(train.resolve()), *arguments]
        try:
            return [*shlex.split(image), *arguments]
        except ValueError as exc:
            raise ValidationException(f"TrainingImage {image!r} is not a command line: {exc}.") from None
    raise ValidationException(
        "Nothing to run: give AlgorithmSpecification.ContainerEntrypoint (a command as a list) or a TrainingImage "
        "(a command line, or a directory with an executable 'train')."
    )
