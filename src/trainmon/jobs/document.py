"""The training job document: what CreateTrainingJob asks for and what DescribeTrainingJob answers.

A job is stored as one JSON document (:class:`JobDocument`): SageMaker's describe fields, times as
epoch seconds, plus ``TrainmonConfig`` (how trainmon runs it: the command, the record mode, the
grace period), ``UnstoredOutput`` (what could not be stored, when something could not) and
``RuleFindings`` (what the job's rules found: :mod:`trainmon.jobs.rulestatus`). The
types below are the fields trainmon reads and writes; SageMaker's other request fields (Tags,
VpcConfig, ...) are kept as they were given. :class:`Description` is the DescribeTrainingJob
answer built from a document (see :func:`trainmon.jobs.status.description`): SageMaker's fields only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

ACCOUNT = "000000000000"
REGION = "local"


def arn(name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name.lower()}"


def defined_metrics(doc: Mapping[str, Any]) -> list[str]:
    """A job's metric names in the order its definitions give them (a name several share, once)."""
    return list(dict.fromkeys(d["Name"] for d in doc.get("AlgorithmSpecification", {}).get("MetricDefinitions", [])))


class MetricDefinitionDoc(TypedDict):
    Name: str
    Regex: str


class AlgorithmSpecification(TypedDict):
    TrainingInputMode: str
    MetricDefinitions: list[MetricDefinitionDoc]
    TrainingImage: NotRequired[str]
    ContainerEntrypoint: NotRequired[list[str]]
    ContainerArguments: NotRequired[list[str]]
    AlgorithmName: NotRequired[str]
    EnableSageMakerMetricsTimeSeries: NotRequired[bool]


class S3DataSource(TypedDict):
    S3Uri: str
    S3DataType: NotRequired[str]
    S3DataDistributionType: NotRequired[str]


class DataSource(TypedDict):
    S3DataSource: S3DataSource


class Channel(TypedDict):
    ChannelName: str
    DataSource: DataSource
    ContentType: NotRequired[str]
    CompressionType: NotRequired[str]
    InputMode: NotRequired[str]


class OutputDataConfig(TypedDict):
    S3OutputPath: str
    KmsKeyId: NotRequired[str]
    CompressionType: NotRequired[str]


class ResourceConfig(TypedDict):
    InstanceType: str
    InstanceCount: int
    VolumeSizeInGB: int
    KeepAlivePeriodInSeconds: NotRequired[int]


class StoppingCondition(TypedDict):
    MaxRuntimeInSeconds: int
    MaxWaitTimeInSeconds: NotRequired[int]
    MaxPendingTimeInSeconds: NotRequired[int]


class ProfilerConfig(TypedDict):
    DisableProfiler: bool
    S3OutputPath: NotRequired[str]
    ProfilingIntervalInMilliseconds: NotRequired[int]
    ProfilingParameters: NotRequired[dict[str, str]]


class ScriptMode(TypedDict):
    """A script-mode job (the SageMaker SDK's framework estimators), as the training toolkit runs it:
    its source unpacked into each host's code directory, the entry point run there."""

    Program: str  # sagemaker_program, relative to the code directory
    Source: str  # the local file or directory sagemaker_submit_directory named when the job was created


class ContainerImage(TypedDict):
    """The image a job's hosts run in, as containers (TrainingImage named one)."""

    Reference: str  # as the engine takes it: registry/path:tag or @digest
    Entrypoint: NotRequired[list[str]]  # ContainerEntrypoint, in place of the image's own


class TrainmonConfig(TypedDict):
    """trainmon's own settings (``TrainmonConfig`` in the request; not part of SageMaker's API), and
    what the request's URIs named on this machine when the job was created."""

    Command: list[str]  # what each host runs: ContainerEntrypoint + ContainerArguments, the image's train, or
    # a script-mode entry point; for a container (Image), its arguments (ContainerArguments, else train)
    Image: NotRequired[ContainerImage]
    AbsentImage: NotRequired[str]  # a framework image this machine lacks: the job runs as processes instead
    RecordMode: str  # terminal, sagemaker or raw (trainmon.parsing.framing.Mode)
    StopGraceSeconds: float
    StoreWaitSeconds: NotRequired[float]  # once the job has ended, how long it waits for a store that refuses writes
    WorkingDirectory: str  # not for script mode: its entry point runs in each host's code directory
    SystemMetricsIntervalSeconds: int
    Interpreter: NotRequired[str]  # the Python of a script-mode entry point
    Script: NotRequired[ScriptMode]
    ChannelPaths: NotRequired[dict[str, str]]  # each channel's local file or directory
    ModelArtifactsPath: NotRequired[str]  # the local file of ModelArtifacts.S3ModelArtifacts
    ArtifactsToS3: NotRequired[bool]  # a Ray job's s3:// archives go to S3 from algo-1's node (boto3), not our objects
    Launcher: NotRequired[str]  # a launcher of runtime/launchers/registry.py ("local" when absent)
    RayAddress: NotRequired[str]
    HostResources: NotRequired[dict[str, float]]  # the Ray resources one host takes
    ResourceWaitSeconds: NotRequired[int]  # how long the hosts wait for room on the cluster
    WaitForNodes: NotRequired[bool]  # too few nodes could hold the hosts: wait for more, not fail


class ModelArtifacts(TypedDict):
    S3ModelArtifacts: str


class Transition(TypedDict):
    Status: str
    StartTime: float
    StatusMessage: str
    EndTime: NotRequired[float]


class UnstoredOutput(TypedDict):
    """What the store never took (a full disk, an outage that outlasted the job): counted, never silent."""

    Records: int
    Points: int
    Bytes: int
    Reason: str


class RuleEvaluationStatus(TypedDict):
    """A rule's evaluation as DescribeTrainingJob lists it (see :mod:`trainmon.jobs.rulestatus`)."""

    RuleConfigurationName: str
    RuleEvaluationJobArn: str
    RuleEvaluationStatus: str  # InProgress, NoIssuesFound, IssuesFound, Error, Stopping, Stopped
    LastModifiedTime: float
    StatusDetails: NotRequired[str]


class RuleFindings(TypedDict):
    """One rule's findings: how many, and the first and the latest ones (bounded)."""

    Count: int
    Findings: list[dict[str, Any]]


class SageMakerFields(TypedDict):
    """What the stored document and DescribeTrainingJob's answer both hold: SageMaker's fields."""

    TrainingJobName: str
    TrainingJobArn: str
    TrainingJobStatus: str
    SecondaryStatus: str
    AlgorithmSpecification: AlgorithmSpecification
    RoleArn: str
    HyperParameters: dict[str, str]
    InputDataConfig: list[Channel]
    OutputDataConfig: OutputDataConfig
    ResourceConfig: ResourceConfig
    StoppingCondition: StoppingCondition
    Environment: dict[str, str]
    ModelArtifacts: ModelArtifacts
    CreationTime: float
    LastModifiedTime: float
    SecondaryStatusTransitions: list[Transition]
    EnableNetworkIsolation: bool
    EnableInterContainerTrafficEncryption: bool
    EnableManagedSpotTraining: bool
    ProfilerConfig: ProfilerConfig
    TrainingStartTime: NotRequired[float]
    TrainingEndTime: NotRequired[float]
    TrainingTimeInSeconds: NotRequired[int]
    BillableTimeInSeconds: NotRequired[int]
    FailureReason: NotRequired[str]
    Tags: NotRequired[list[dict[str, str]]]
    CheckpointConfig: NotRequired[dict[str, Any]]
    DebugHookConfig: NotRequired[dict[str, Any]]
    ExperimentConfig: NotRequired[dict[str, Any]]
    DebugRuleConfigurations: NotRequired[list[dict[str, Any]]]
    ProfilerRuleConfigurations: NotRequired[list[dict[str, Any]]]
    DebugRuleEvaluationStatuses: NotRequired[list[RuleEvaluationStatus]]
    ProfilerRuleEvaluationStatuses: NotRequired[list[RuleEvaluationStatus]]
    TuningJobArn: NotRequired[str]  # a hyperparameter tuning job's trial


class HostPlacement(TypedDict):
    Host: str
    NodeId: str  # Ray's
    Address: str
    Hostname: str


class JobDocument(SageMakerFields):
    """The job as stored: SageMaker's fields and trainmon's own."""

    TrainmonConfig: TrainmonConfig
    UnstoredOutput: NotRequired[UnstoredOutput]
    RuleFindings: NotRequired[dict[str, RuleFindings]]  # per RuleConfigurationName
    HostPlacements: NotRequired[list[HostPlacement]]  # a Ray job: the node each host runs on


class SupervisorIdentity(TypedDict):
    """The process that supervises a job, as recorded with it (against a reused process id: its start time)."""

    pid: int
    create_time: float
    hostname: str
    tag: str  # the job's process tag: what is left of the job when the supervisor is gone (runtime/processes/tags.py)


class FinalMetric(TypedDict):
    MetricName: str
    Value: float
    Timestamp: float


class Description(SageMakerFields):
    """DescribeTrainingJob's answer, times in epoch seconds (the operations layer turns them into
    datetimes, boto3's type): the document without trainmon's own fields, with the final metrics."""

    ProfilingStatus: str
    FinalMetricDataList: list[FinalMetric]
