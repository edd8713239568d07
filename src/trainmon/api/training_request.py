"""The CreateTrainingJob request: its shape, and the job document a valid one becomes.

Every field is checked before anything is stored or started (:data:`SHAPE`, AWS's limits and
patterns, plus what running the job locally needs: paths and objects that exist, strings a process
can receive). Fields trainmon does not act on (VpcConfig, RetryStrategy, ...) are checked for their
members and kept in the document as given, as SageMaker echoes them.

A URI names a local path (``/data/train``, ``file:///data/train``) or an object, or a prefix of
objects, in trainmon's S3 subset (``s3://bucket/key``: :func:`trainmon.store.objects.resolve`).
What the inputs named is recorded in ``TrainmonConfig`` (``ChannelPaths``, ``Script.Source``), so
the supervisor reads local files; the model archive of an s3:// output path becomes an object. A
request shaped as the SageMaker SDK's framework estimators send it (HyperParameters
``sagemaker_program`` and ``sagemaker_submit_directory``, a framework image) runs in script mode
(:mod:`trainmon.runtime.contract.toolkit`).
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from .. import config
from ..errors import S3Error, ValidationException
from ..jobs import rulestatus
from ..jobs.document import (
    ACCOUNT,
    AlgorithmSpecification,
    Channel,
    ContainerImage,
    JobDocument,
    ProfilerConfig,
    ScriptMode,
    TrainmonConfig,
    arn,
)
from ..jobs.status import MESSAGES
from ..parsing import literals
from ..parsing.definitions import validate_definitions
from ..parsing.framing import Mode
from ..rules import catalog
from ..rules.configs import DEBUGGER_IMAGE
from ..rules.profiler_setup import default_report
from ..runtime.containers import engine, image
from ..runtime.contract import checkpoints, toolkit
from ..runtime.launchers import registry
from ..runtime.retry import STORE_WAIT_S
from ..runtime.watch import notify
from ..shapes import Boolean, Integer, Json, ListOf, MapOf, Number, Problems, String, Structure, validate
from ..store import objects, profiles

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
        "StoreWaitSeconds": Number(0, 7 * 24 * 3600, hint="once the job has ended, how long it waits for a store "
                                   "that refuses writes before it leaves the rest of its output for later"),
        "WorkingDirectory": String(1, 4096, to_process=True),
        "SystemMetricsIntervalSeconds": Integer(1, 60),
        "Interpreter": String(1, 4096, to_process=True, hint="the Python that runs a script-mode entry point"),
        "Launcher": String(enum=tuple(registry.KINDS), hint="; ".join(
            f"{kind.name}: {kind.about}" for kind in registry.KINDS.values())),
        **{name: shape for kind in registry.KINDS.values() for name, shape in kind.members.items()},
    }),
}, required=("TrainingJobName",))

_KEPT_AS_GIVEN = ("Tags", "VpcConfig", "CheckpointConfig", "DebugHookConfig", "DebugRuleConfigurations",
                  "TensorBoardOutputConfig", "ExperimentConfig", "ProfilerRuleConfigurations", "RetryStrategy",
                  "RemoteDebugConfig", "InfraCheckConfig", "SessionChainingConfig", "ServerlessJobConfig",
                  "MlflowConfig", "ModelPackageConfig", "TrainingPlanArn")


def job_document(request: Mapping[str, Any], now: float, *, home: Path | None = None,
                 database_url: str | None = None) -> JobDocument:
    """A valid CreateTrainingJob request as the job document to store (ValidationException otherwise);
    ``s3://`` URIs name objects of the data directory ``home`` (default: TRAINMON_HOME). A Ray job
    needs a shared store (``database_url``, PostgreSQL)."""
    root = home or config.home()
    checked = validate(SHAPE, request)
    launcher = registry.kind(checked.get("TrainmonConfig", {}).get("Launcher"))
    launcher.check(checked, database_url, root)
    checkpoints.check(checked.get("CheckpointConfig"), root)
    name: str = checked["TrainingJobName"]
    algorithm = _algorithm(checked.get("AlgorithmSpecification", {}))
    hyperparameters: dict[str, str] = checked.get("HyperParameters", {})
    if len(json.dumps(hyperparameters)) > MAX_HYPERPARAMETER_JSON_BYTES:
        raise ValidationException(f"HyperParameters take more than {MAX_HYPERPARAMETER_JSON_BYTES} bytes as JSON: "
                                  "the job receives them all in one environment variable (SM_HPS); pass large "
                                  "values in a file through an input channel instead.")
    output = {"S3OutputPath": config.output_dir(root).as_uri(), **checked.get("OutputDataConfig", {})}
    artifacts_uri, artifacts_path = _model_artifacts(output["S3OutputPath"], name, root,
                                                     through_s3=not launcher.files_here)
    channels: list[Channel] = checked.get("InputDataConfig", [])
    instance_type = checked.get("ResourceConfig", {}).get("InstanceType", "local")
    settings = _trainmon_config(checked.get("TrainmonConfig", {}), algorithm, hyperparameters, root, instance_type,
                                checked.get("EnableNetworkIsolation", False))
    settings["ChannelPaths"] = _channel_paths(channels, root)
    if artifacts_path is not None:
        settings["ModelArtifactsPath"] = str(artifacts_path)
    elif not launcher.files_here and artifacts_uri.startswith("s3://"):
        settings["ArtifactsToS3"] = True
    doc: dict[str, Any] = {
        "TrainingJobName": name,
        "TrainingJobArn": arn(name),
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Starting",
        "AlgorithmSpecification": algorithm,
        "RoleArn": checked.get("RoleArn") or f"arn:aws:iam::{ACCOUNT}:role/trainmon-local",
        "HyperParameters": hyperparameters,
        "InputDataConfig": channels,
        "OutputDataConfig": output,
        "ResourceConfig": {"InstanceType": "local", "InstanceCount": 1, "VolumeSizeInGB": 0,
                           **checked.get("ResourceConfig", {})},
        "StoppingCondition": {"MaxRuntimeInSeconds": DEFAULT_MAX_RUNTIME_S, **checked.get("StoppingCondition", {})},
        "Environment": checked.get("Environment", {}),
        "ModelArtifacts": {"S3ModelArtifacts": artifacts_uri},
        "CreationTime": now,
        "LastModifiedTime": now,
        "SecondaryStatusTransitions": [{"Status": "Starting", "StartTime": now, "StatusMessage": MESSAGES["Starting"]}],
        "EnableNetworkIsolation": checked.get("EnableNetworkIsolation", False),
        "EnableInterContainerTrafficEncryption": checked.get("EnableInterContainerTrafficEncryption", False),
        "EnableManagedSpotTraining": checked.get("EnableManagedSpotTraining", False),
        "ProfilerConfig": _profiler_config(checked.get("ProfilerConfig")),
        "TrainmonConfig": settings,
    }
    doc.update({field: checked[field] for field in _KEPT_AS_GIVEN if field in checked})
    doc.update(_rule_statuses(checked, algorithm, name, now, _why_not_profiled(checked, doc["ProfilerConfig"])))
    return cast(JobDocument, doc)


def _rule_statuses(checked: dict[str, Any], algorithm: AlgorithmSpecification, name: str,
                   now: float, not_profiled: str | None = None) -> dict[str, Any]:
    """The rule configurations read against the job's metric definitions (ValidationException naming
    the rule and parameter of every problem), as the initial evaluation statuses. ``not_profiled``:
    why the job has no profiler, which every profiler rule reads."""
    metric_names = [d["Name"] for d in algorithm["MetricDefinitions"]]
    problems = Problems()
    statuses: dict[str, Any] = {}
    seen: set[str] = set()
    for kind, field in rulestatus.KINDS.items():
        configs = checked.get(kind) or []
        setups = []
        for index, given in enumerate(configs, 1):
            where = f"{kind[:1].lower()}{kind[1:]}.{index}.member"
            rule = catalog.setup(given, kind, metric_names, name, notify.check_target)
            for issue in rule.issues:
                problems.add(issue.value, f"{where}.{issue.where}", issue.constraint, issue.hint)
            if not_profiled is not None and rule.rule in catalog.PROFILER_RULES:
                problems.add(rule.rule, f"{where}.ruleParameters.rule_to_invoke", "Member must be a rule the job can "
                             f"evaluate: profiler rules read the profiler's data, and {not_profiled}",
                             f"rule {rule.name}: turn the profiler on, or leave the rule out")
            if rule.name in seen:
                problems.add(rule.name, f"{where}.ruleConfigurationName", "Member must be unique among the job's "
                             "DebugRuleConfigurations and ProfilerRuleConfigurations")
            seen.add(rule.name)
            setups.append(rule)
        if setups:
            statuses[field] = rulestatus.initial(name, [(r.name, r.not_evaluated) for r in setups], now)
    problems.raise_if_any()
    return statuses


def _algorithm(given: dict[str, Any]) -> AlgorithmSpecification:
    algorithm = cast(AlgorithmSpecification, {"TrainingInputMode": "File", **given})
    definitions = validate_definitions(given.get("MetricDefinitions") or [])
    if definitions:
        literals.check_setting()  # TRAINMON_LITERAL_ENGINE, refused before the job exists
    algorithm["MetricDefinitions"] = [{"Name": d.name, "Regex": d.regex} for d in definitions]
    return algorithm


def _channel_paths(channels: list[Channel], root: Path) -> dict[str, str]:
    """The local file or directory of each channel (its S3Uri must name one)."""
    names = [channel["ChannelName"] for channel in channels]
    for name in names:
        if name in (".", ".."):
            raise ValidationException(f"ChannelName {name!r} is a path component, not a name: it would become the "
                                      f"directory input/data/{name}; choose a name with a letter or digit.")
    if len(set(names)) != len(names):
        raise ValidationException("InputDataConfig: channel names must be unique.")
    paths = {}
    for channel in channels:
        source = channel["DataSource"].get("S3DataSource")
        if source is None:
            raise ValidationException(f"Channel {channel['ChannelName']!r} needs DataSource.S3DataSource.S3Uri "
                                      "(a path, a file:// URI or an s3:// URI).")
        path = _local_path(source["S3Uri"], f"Channel {channel['ChannelName']!r}", root)
        if not path.exists():
            raise ValidationException(f"Channel {channel['ChannelName']!r}: {path} does not exist.")
        paths[channel["ChannelName"]] = str(path)
    return paths


def _local_path(uri: str, field: str, root: Path) -> Path:
    """What a URI names on this machine: a local path, or an object (or prefix) of trainmon's S3 subset."""
    if uri.startswith("s3://"):
        return _stored_object(uri, field, root)
    if uri.startswith("file://"):
        return Path(uri[len("file://"):])
    if "://" in uri:
        raise ValidationException(
            f"{field} {uri!r}: only local paths, file:// URIs and s3:// URIs of trainmon's object store are "
            "supported; copy the data locally and give its path."
        )
    return Path(uri).expanduser().resolve()


def _stored_object(uri: str, field: str, root: Path) -> Path:
    """The local file (or, for a prefix, folder) of an s3:// URI; ValidationException when it names nothing."""
    try:
        return objects.resolve(root, uri)
    except ValidationException as exc:
        raise ValidationException(f"{field}: {exc.message}") from None


def _model_artifacts(output_path: str, name: str, root: Path, *, through_s3: bool = False) -> tuple[str, Path | None]:
    """``ModelArtifacts.S3ModelArtifacts`` (``<output path>/<job>/output/model.tar.gz``) and its local
    file; none for an s3:// output path, whose archive becomes an object of the object store (its
    bucket must exist), or, ``through_s3`` (a Ray job), an object of S3 or an S3-compatible service
    written from algo-1's node, whose AWS configuration says where (its bucket is checked there)."""
    field = "OutputDataConfig.S3OutputPath"
    if not output_path.startswith("s3://"):
        local = _local_path(output_path, field, root) / name / "output" / "model.tar.gz"
        return local.as_uri(), local
    uri = f"{output_path.rstrip('/')}/{name}/output/model.tar.gz"
    bucket, key = objects.parse_uri(uri)
    try:
        objects.check_bucket_name(bucket)
        objects.check_key(key)
        if not through_s3:
            objects.ObjectStore(root).head_bucket(bucket)
    except S3Error as exc:
        raise ValidationException(f"{field} {output_path!r}: {exc.message}") from None
    return uri, None


def _trainmon_config(given: dict[str, Any], algorithm: AlgorithmSpecification, hyperparameters: dict[str, str],
                     root: Path, instance_type: str, isolated: bool) -> TrainmonConfig:
    script = _script_mode(algorithm, hyperparameters, root)
    absent = _framework_image_absent(algorithm, script is not None)
    if absent is not None and isolated:
        raise ValidationException(f"EnableNetworkIsolation: the image {absent} is not on this machine, and the processes "
                                  "that would run in its place cannot be cut off from the network: pull or build "
                                  "the image to run the job isolated in it, or run it without isolation.")
    container = _container(algorithm) if absent is None and _in_a_container(algorithm, script) else None
    settings: TrainmonConfig = {
        "Command": container_arguments(algorithm) if container else resolve_command(algorithm) if script is None else [],
        "RecordMode": given.get("RecordMode", Mode.TERMINAL.value),
        "StopGraceSeconds": given.get("StopGraceSeconds", DEFAULT_STOP_GRACE_S),
        "StoreWaitSeconds": given.get("StoreWaitSeconds", STORE_WAIT_S),
        "WorkingDirectory": given.get("WorkingDirectory") or os.getcwd(),
        "SystemMetricsIntervalSeconds": given.get("SystemMetricsIntervalSeconds", 60),
    }
    if not Path(settings["WorkingDirectory"]).is_dir():
        raise ValidationException(f"TrainmonConfig.WorkingDirectory {settings['WorkingDirectory']!r} is not a "
                                  "directory.")
    launcher = registry.kind(given.get("Launcher"))
    if container is not None:
        settings["Image"] = container
    if absent is not None:
        settings["AbsentImage"] = absent
    if launcher.name != registry.DEFAULT:
        settings["Launcher"] = launcher.name
        launcher.complete(cast(dict[str, Any], settings), given, instance_type)
    if script is not None:
        settings["Script"] = script
    if (script is not None or absent is not None) and container is None:
        settings["Interpreter"] = _interpreter(given.get("Interpreter"))
    if script is not None and container is None:
        user = toolkit.split(hyperparameters).user
        settings["Command"] = toolkit.command(script["Program"], settings["Interpreter"], toolkit.to_cmd_args(user))
    return settings


def _in_a_container(algorithm: AlgorithmSpecification, script: ScriptMode | None) -> bool:
    """Whether the hosts run in the TrainingImage: always when it names an image, but a script-mode
    job's only when it names one (not ``local`` or nothing)."""
    return script is None or image.named_image(algorithm.get("TrainingImage", "")) is not None


def _framework_image_absent(algorithm: AlgorithmSpecification, script: bool) -> str | None:
    """The framework image a job names when this machine does not have it and the job can run
    without it (None otherwise): a script-mode entry point then runs with a local Python, as the
    image's toolkit would run it, and a ContainerEntrypoint (the SageMaker SDK v3's driver) as a
    process that sees /opt/ml. Any other image that is not here is pulled when the job starts."""
    reference = image.named_image(algorithm.get("TrainingImage", ""))
    if reference is None or not (script or algorithm.get("ContainerEntrypoint") and toolkit.is_framework_image(
            reference.name)):
        return None
    try:
        if engine.find().present(reference.name):
            return None
    except engine.EngineError:
        pass  # no engine: no image is here
    return reference.name


def _script_mode(algorithm: AlgorithmSpecification, hyperparameters: dict[str, str], root: Path) -> ScriptMode | None:
    """The entry point and source of a script-mode request, checked; None for a request of another kind.

    Script mode is a request with ``sagemaker_program`` and no ContainerEntrypoint whose TrainingImage
    is absent, ``local`` or an image in Amazon ECR (the framework images): such an image is never
    pulled; the job runs in it when this machine has it, else its entry point runs with a local
    Python. A local image (a directory, a command line) runs as it is and may run the toolkit itself.
    """
    image = algorithm.get("TrainingImage", "").strip()
    if toolkit.PROGRAM not in hyperparameters or algorithm.get("ContainerEntrypoint"):
        return None
    if image not in ("", "local") and not toolkit.is_ecr_image(image):
        return None
    problems = Problems()
    program_path, source_path = (f"hyperParameters.{key}" for key in (toolkit.PROGRAM, toolkit.SUBMIT_DIRECTORY))
    given_program = hyperparameters[toolkit.PROGRAM]
    program = toolkit.decode(given_program)
    issue = toolkit.program_problem(program)
    if issue is not None:
        problems.add(given_program, program_path, issue)
    given_source = hyperparameters.get(toolkit.SUBMIT_DIRECTORY)
    uri = toolkit.decode(given_source) if given_source is not None else None
    if not isinstance(uri, str) or not uri.strip():
        problems.add(given_source, source_path, "Member must be the URI of the entry point's source, a JSON string "
                     "(s3://, file:// or a path)", "script mode: sagemaker_program names the entry point, "
                     "sagemaker_submit_directory the source it is in")
    problems.raise_if_any()
    assert isinstance(uri, str) and isinstance(program, str)
    try:
        source = _local_path(uri, f"HyperParameters.{toolkit.SUBMIT_DIRECTORY}", root)
        toolkit.check_source(source, program)
    except toolkit.MissingProgram as exc:
        problems.add(given_program, program_path, f"Member must name a file in the submitted source: {uri} {exc}")
    except toolkit.SourceError as exc:
        problems.add(given_source, source_path, "Member must name a directory or a tar archive (sourcedir.tar.gz) "
                     f"that can be unpacked safely: {uri} {exc}")
    except ValidationException as exc:
        problems.add(given_source, source_path, f"Member must name the entry point's source: {exc.message}")
    problems.raise_if_any()
    return {"Program": posixpath.normpath(program), "Source": str(source)}


def _container(algorithm: AlgorithmSpecification) -> ContainerImage | None:
    """The image a request's hosts run in, when its TrainingImage names one (ValidationException
    when no container engine is installed); None for a command line or a directory."""
    given = algorithm.get("TrainingImage", "")
    reference = image.named_image(given)
    if reference is None:
        return None
    try:
        engine.find()
    except engine.EngineError as exc:
        raise ValidationException(f"TrainingImage {given!r} is a container image, and {exc}") from None
    found: ContainerImage = {"Reference": reference.name}
    if algorithm.get("ContainerEntrypoint"):
        found["Entrypoint"] = algorithm["ContainerEntrypoint"]
    return found


def container_arguments(algorithm: AlgorithmSpecification) -> list[str]:
    """What a training image's entry point is given: ContainerArguments, else ``train`` (SageMaker's
    contract) when the image's own entry point runs, else nothing."""
    if "ContainerArguments" in algorithm:
        return algorithm["ContainerArguments"]
    return [] if algorithm.get("ContainerEntrypoint") else ["train"]


def _interpreter(given: str | None) -> str:
    """The Python that runs a script-mode entry point, checked: TrainmonConfig.Interpreter, else
    TRAINMON_PYTHON, else the one running trainmon."""
    name = given or config.python_interpreter()
    found = shutil.which(name)
    if found is None:
        where = "TrainmonConfig.Interpreter" if given else config.PYTHON_VARIABLE
        raise ValidationException(f"{where} {name!r} is not an executable Python interpreter: give its path, or a "
                                  "name on PATH.")
    return os.path.abspath(found)  # a virtual environment's python is a link: resolving it would leave the venv


def _why_not_profiled(checked: Mapping[str, Any], settings: ProfilerConfig) -> str | None:
    """Why a job has no profiler (None: it has one)."""
    if not settings.get("DisableProfiler"):
        return None
    if (checked.get("ProfilerConfig") or {}).get("DisableProfiler"):
        return "this job's profiler is disabled (ProfilerConfig.DisableProfiler, --disable-profiler)"
    return "the profiler needs pyarrow, which is not installed (pip install 'trainmon[profiler]')"


def profiler_enabled(given: Mapping[str, Any] | None) -> bool:
    """Whether a job with this ProfilerConfig (None: not given) is profiled."""
    if given is not None and given.get("DisableProfiler"):
        return False
    return given is not None or profiles.available()


def with_profiler_report(request: dict[str, Any], now: float) -> dict[str, Any]:
    """A CreateTrainingJob request with a ``ProfilerReport-<epoch seconds>`` profiler rule, as the
    SageMaker SDK adds it to a job that profiles, unless the request has profiler rules already."""
    if request.get("ProfilerRuleConfigurations") or not profiler_enabled(request.get("ProfilerConfig")):
        return request
    return {**request, "ProfilerRuleConfigurations": [default_report(now, DEBUGGER_IMAGE)]}


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
