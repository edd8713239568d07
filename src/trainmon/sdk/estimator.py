"""An Estimator like the SageMaker Python SDK's, running jobs through trainmon.

Scripts written for ``sagemaker.estimator.Estimator`` run by changing the import:

    from trainmon import Estimator
    estimator = Estimator(entry_point="train.py", role="local", instance_count=1, instance_type="local",
                          metric_definitions=[{"Name": "train:error", "Regex": "Train_error=(.*?);"}])
    estimator.fit({"train": "data/train"})
    estimator.training_job_analytics.dataframe()

A local "image" is a command line (``"python train.py"``) or a directory holding an executable
``train``; ``entry_point`` (+ ``source_dir``) runs a Python script with the hyperparameters as
``--name value`` arguments, as the SDK's framework estimators do. ``rules`` takes
``trainmon.rules.Rule.sagemaker(rule_configs.loss_not_decreasing())`` and the like (the SDK's own
``Rule`` objects too); a job that profiles gets a ``ProfilerReport-<epoch seconds>`` profiler rule
unless ``rules`` holds profiler rules or is ``[]``, as the SDK did: see docs/rules.md.
"""

from __future__ import annotations

import re
import sys
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from .. import config
from ..api import logs as cloudwatch_logs
from ..api import sagemaker, trainmon
from ..api.logs import LOG_GROUP
from ..api.training_request import DEFAULT_MAX_RUNTIME_S, with_profiler_report
from ..errors import TrainmonError
from ..jobs.document import ACCOUNT
from ..jobs.status import TERMINAL
from ..rules import catalog
from ..rules.configs import as_request
from ..runtime.containers.image import named_image
from ..store import open_store
from .analytics import TrainingJobAnalytics
from .clients import SageMakerClient

# Accepted for compatibility, meaningless off AWS: each gives a warning naming it.
AWS_ONLY_ARGUMENTS = frozenset({
    "subnets", "security_group_ids", "volume_size", "volume_kms_key", "output_kms_key", "model_uri",
    "model_channel_name", "encrypt_inter_container_traffic", "use_spot_instances", "max_wait", "checkpoint_s3_uri",
    "checkpoint_local_path", "enable_network_isolation", "git_config", "container_log_level", "code_location",
    "dependencies", "debugger_hook_config", "tensorboard_output_config", "enable_sagemaker_metrics",
    "keep_alive_period_in_seconds", "training_repository_access_mode", "training_repository_credentials_provider_arn",
    "disable_output_compression", "max_retry_attempts", "input_mode", "instance_groups", "training_plan",
})
_ENDING = ("Uploading", "Completed", "Failed", "Stopped", "MaxRuntimeExceeded")


class UnexpectedStatusException(ValueError):
    """The job ended in a status the caller did not want (the SageMaker SDK's exception)."""

    def __init__(self, message: str, allowed_statuses: list[str], actual_status: str) -> None:
        super().__init__(message)
        self.allowed_statuses = allowed_statuses
        self.actual_status = actual_status


class Session:
    """Where jobs live: the embedded store in ``home`` (default: TRAINMON_HOME). ``sagemaker_client``
    is the SDK Session's: a SageMaker client on that store."""

    def __init__(self, home: str | Path | None = None) -> None:
        self.home = Path(home).expanduser().resolve() if home is not None else config.home()
        self.store = open_store(self.home)
        self.sagemaker_client = SageMakerClient(self.store)

    def describe_training_job(self, job_name: str) -> dict[str, Any]:
        return sagemaker.describe_training_job(self.store, TrainingJobName=job_name)

    def wait_for_job(self, job_name: str, poll: float = 0.5) -> dict[str, Any]:
        while True:
            description = self.describe_training_job(job_name)
            if description["TrainingJobStatus"] in TERMINAL:
                return description
            time.sleep(poll)

    def logs_for_job(self, job_name: str, wait: bool = False, poll: float = 0.5, out: TextIO | None = None) -> None:
        """Print every host's log records and the status changes, until the job ends when ``wait``."""
        LogPrinter(self, job_name, out or sys.stdout).run(wait=wait, poll=poll)


class LogPrinter:
    """Follows a job as the SDK's ``logs_for_job`` does: DescribeLogStreams, then GetLogEvents per stream."""

    def __init__(self, session: Session, job_name: str, out: TextIO) -> None:
        self.session = session
        self.job_name = job_name
        self.out = out
        self.tokens: dict[str, str] = {}
        self.transitions_shown = 0

    def run(self, *, wait: bool, poll: float) -> None:
        while True:
            description = self.session.describe_training_job(self.job_name)
            finished = description["TrainingJobStatus"] in TERMINAL
            self._statuses(description, final=False)
            self._events(description["ResourceConfig"]["InstanceCount"] > 1)
            if finished or not wait:
                if finished:
                    self._statuses(description, final=True)  # the end, after the last records
                return
            time.sleep(poll)

    def _statuses(self, description: dict[str, Any], *, final: bool) -> None:
        """Status changes; those that end a job wait until its last records are printed."""
        transitions = description.get("SecondaryStatusTransitions", [])
        if not final:
            ending = [i for i, t in enumerate(transitions) if t["Status"] in _ENDING]
            transitions = transitions[: ending[0]] if ending else transitions
        for transition in transitions[self.transitions_shown:]:
            stamp = transition["StartTime"].strftime("%Y-%m-%d %H:%M:%S")
            self.out.write(f"{stamp} {transition['Status']} - {transition.get('StatusMessage', '')}\n")
        self.transitions_shown = len(transitions)
        self.out.flush()

    def _events(self, prefix_hosts: bool) -> None:
        store = self.session.store
        streams = cloudwatch_logs.describe_log_streams(store, logGroupName=LOG_GROUP, logStreamNamePrefix=f"{self.job_name}/")
        for stream in streams["logStreams"]:
            name = stream["logStreamName"]
            host = name.split("/", 1)[1].rsplit("-", 1)[0]
            while True:
                arguments: dict[str, Any] = {"logGroupName": LOG_GROUP, "logStreamName": name, "startFromHead": True}
                if name in self.tokens:
                    arguments["nextToken"] = self.tokens[name]
                page = cloudwatch_logs.get_log_events(store, **arguments)
                self.tokens[name] = page["nextForwardToken"]
                if not page["events"]:
                    break
                prefix = f"[{host}] " if prefix_hosts else ""
                self.out.write("".join(f"{prefix}{event['message']}\n" for event in page["events"]))
                self.out.flush()


class TrainingJob:
    """The SDK's ``_TrainingJob``: one job of an estimator."""

    def __init__(self, session: Session, job_name: str) -> None:
        self.sagemaker_session = session
        self.job_name = job_name
        self.name = job_name

    def describe(self) -> dict[str, Any]:
        return self.sagemaker_session.describe_training_job(self.job_name)

    def stop(self) -> None:
        sagemaker.stop_training_job(self.sagemaker_session.store, TrainingJobName=self.job_name)

    def wait(self, logs: str | bool = "All", poll: float = 0.5) -> dict[str, Any]:
        """Wait for the end (printing logs unless ``logs`` is "None"/False); raise unless it Completed."""
        try:
            if logs and logs != "None":
                self.sagemaker_session.logs_for_job(self.job_name, wait=True, poll=poll)
            description = self.sagemaker_session.wait_for_job(self.job_name, poll=poll)
        except KeyboardInterrupt:
            self._offer_stop()
            raise
        return self._check(description)

    def _offer_stop(self) -> None:
        status = self.describe()["TrainingJobStatus"]
        if status != "InProgress":
            return
        answer = ""
        if sys.stdin is not None and sys.stdin.isatty():
            try:
                answer = input(f"\nStop training job {self.job_name}? [y/N] ").strip().lower()
            except (EOFError, KeyboardInterrupt):
                answer = ""
        if answer in ("y", "yes"):
            self.stop()
            print(f"Stopping {self.job_name}.", file=sys.stderr)
        else:
            print(f"\nTraining job {self.job_name} keeps running; follow it again with "
                  f"Estimator.attach({self.job_name!r}) or `trainmon logs {self.job_name} --follow`.", file=sys.stderr)

    def _check(self, description: dict[str, Any]) -> dict[str, Any]:
        status = description["TrainingJobStatus"]
        seconds = description.get("TrainingTimeInSeconds")
        if seconds is not None:
            count = description["ResourceConfig"]["InstanceCount"]
            print(f"Training seconds: {seconds * count}")
            print(f"Billable seconds: {description.get('BillableTimeInSeconds', seconds) * count}")
        if status == "Failed":
            reason = description.get("FailureReason", "(no reason recorded)")
            raise UnexpectedStatusException(
                f"Error for Training job {self.job_name}: Failed. Reason: {reason}",
                allowed_statuses=["Completed", "Stopped"],
                actual_status=status,
            )
        if status == "Stopped":
            warnings.warn(f"Training job {self.job_name} was stopped ({description['SecondaryStatus']}).",
                          stacklevel=3)
        return description


class Estimator:
    """The SageMaker SDK v2 Estimator's arguments that make sense off AWS, same names and meanings."""

    def __init__(
        self,
        image_uri: str | None = None,
        role: str | None = None,
        instance_count: int = 1,
        instance_type: str = "local",
        *,
        entry_point: str | None = None,
        source_dir: str | None = None,
        hyperparameters: dict[str, Any] | None = None,
        metric_definitions: list[dict[str, str]] | None = None,
        environment: dict[str, str] | None = None,
        max_run: int = DEFAULT_MAX_RUNTIME_S,
        output_path: str | None = None,
        base_job_name: str | None = None,
        tags: list[dict[str, str]] | None = None,
        profiler_config: Any = None,
        disable_profiler: bool = False,
        rules: list[Any] | None = None,
        sagemaker_session: Session | None = None,
        launcher: str = "local",
        ray_address: str | None = None,
        host_resources: dict[str, float] | None = None,
        **aws_only: Any,
    ) -> None:
        unknown = sorted(set(aws_only) - AWS_ONLY_ARGUMENTS)
        if unknown:
            raise TypeError(f"Estimator got unexpected keyword argument(s): {', '.join(unknown)}")
        for name in sorted(aws_only):
            warnings.warn(f"Estimator argument {name!r} has no meaning off AWS and is ignored.", stacklevel=2)
        if image_uri is None and entry_point is None:
            raise ValueError("Give image_uri (a container image, a command line or a directory with an executable "
                             "'train') or entry_point.")
        if entry_point is not None:
            script = Path(source_dir or ".").expanduser() / entry_point
            if not script.is_file():
                raise ValueError(f"entry_point {entry_point!r} not found in {Path(source_dir or '.').resolve()}.")
        self.image_uri = image_uri
        self.role = role or f"arn:aws:iam::{ACCOUNT}:role/trainmon-local"
        self.instance_count = instance_count
        self.instance_type = instance_type
        self.entry_point = entry_point
        self.source_dir = source_dir
        self._hyperparameters = dict(hyperparameters or {})
        self.metric_definitions = list(metric_definitions or [])
        self.environment = dict(environment or {})
        self.max_run = max_run
        self.output_path = output_path
        self.base_job_name = base_job_name
        self.tags = tags
        self.profiler_config = profiler_config
        self.disable_profiler = disable_profiler
        self.rules = list(rules or [])
        self._no_rules = rules is not None and not rules  # rules=[]: no rule at all, not even ProfilerReport
        self.sagemaker_session = sagemaker_session or Session()
        # trainmon's own: "ray" puts each host on a node of the Ray cluster at ray_address (default
        # RAY_ADDRESS), taking host_resources (default: the instance type's); see docs/cluster.md
        self.launcher = launcher
        self.ray_address = ray_address
        self.host_resources = host_resources
        self.latest_training_job: TrainingJob | None = None
        self._current_job_name: str | None = None

    # -- the SDK's surface --------------------------------------------------------------------

    def hyperparameters(self) -> dict[str, str]:
        """As the SDK sends them: every value a string (JSON for non-strings)."""
        import json

        return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in self._hyperparameters.items()}

    def set_hyperparameters(self, **kwargs: Any) -> None:
        self._hyperparameters.update(kwargs)

    def fit(self, inputs: str | dict[str, str] | None = None, wait: bool = True, logs: str | bool = "All",
            job_name: str | None = None) -> None:
        name = job_name or self._job_name()
        store = self.sagemaker_session.store
        request = self._request(name, inputs)
        for warning in catalog.warnings(request):
            warnings.warn(f"Training job {name}: {warning}", stacklevel=2)
        sagemaker.create_training_job(store, **request)
        for warning in trainmon.describe_job_metrics(store, TrainingJobName=name)["Warnings"]:
            warnings.warn(f"Training job {name}: {warning}", stacklevel=2)  # the definitions', as the CLI warns
        self._current_job_name = name
        self.latest_training_job = TrainingJob(self.sagemaker_session, name)
        if wait:
            self.latest_training_job.wait(logs=logs)

    def logs(self) -> None:
        self.sagemaker_session.logs_for_job(self._require_job().job_name, wait=True)

    def stop(self) -> None:
        self._require_job().stop()

    @property
    def model_data(self) -> str:
        return str(self._require_job().describe()["ModelArtifacts"]["S3ModelArtifacts"])

    @property
    def training_job_analytics(self) -> TrainingJobAnalytics:
        return TrainingJobAnalytics(self._require_job().job_name, store=self.sagemaker_session.store)

    @classmethod
    def attach(cls, training_job_name: str, sagemaker_session: Session | None = None, *, wait: bool = True) -> Estimator:
        """An estimator for an existing job (started from the CLI, say); waits for it, as the SDK does."""
        session = sagemaker_session or Session()
        description = session.describe_training_job(training_job_name)
        algorithm = description["AlgorithmSpecification"]
        entrypoint = algorithm.get("ContainerEntrypoint")
        image = algorithm.get("TrainingImage")
        if entrypoint and not (image and named_image(image)):  # a command line, not a container's entry point
            image = " ".join(entrypoint + algorithm.get("ContainerArguments", []))
        estimator = cls(
            image_uri=image or "local",
            role=description.get("RoleArn"),
            instance_count=description["ResourceConfig"]["InstanceCount"],
            instance_type=description["ResourceConfig"]["InstanceType"],
            hyperparameters=description.get("HyperParameters"),
            metric_definitions=algorithm.get("MetricDefinitions"),
            environment=description.get("Environment"),
            max_run=description["StoppingCondition"]["MaxRuntimeInSeconds"],
            output_path=description["OutputDataConfig"]["S3OutputPath"],
            tags=description.get("Tags"),
            sagemaker_session=session,
        )
        estimator._current_job_name = training_job_name
        estimator.latest_training_job = TrainingJob(session, training_job_name)
        if wait:
            estimator.latest_training_job.wait(logs="None")
        return estimator

    # -- helpers ------------------------------------------------------------------------------

    def _require_job(self) -> TrainingJob:
        if self.latest_training_job is None:
            raise ValueError("This estimator has no training job yet: call fit() or Estimator.attach().")
        return self.latest_training_job

    def _job_name(self) -> str:
        image = named_image(self.image_uri or "") if self.entry_point is None else None
        given = image.path.rsplit("/", 1)[-1] if image else Path(self.entry_point or (self.image_uri or "job").split()[0]).stem
        base = self.base_job_name or given or "job"
        base = re.sub(r"[^a-zA-Z0-9-]+", "-", base).strip("-")[:38] or "job"
        return f"{base}-{datetime.now(UTC).strftime('%Y-%m-%d-%H-%M-%S-%f')[:-3]}"

    def _request(self, name: str, inputs: str | dict[str, str] | None) -> dict[str, Any]:
        hyperparameters = self.hyperparameters()
        algorithm: dict[str, Any] = {"TrainingInputMode": "File", "MetricDefinitions": self.metric_definitions}
        environment = dict(self.environment)
        if self.entry_point is not None:
            source = Path(self.source_dir or ".").expanduser().resolve()
            arguments = [part for key, value in hyperparameters.items() for part in (f"--{key}", value)]
            algorithm["ContainerEntrypoint"] = [sys.executable, str(source / self.entry_point), *arguments]
            environment.setdefault("SM_MODULE_DIR", str(source))
            environment.setdefault("PYTHONPATH", str(source))
        else:
            algorithm["TrainingImage"] = self.image_uri
        channels = {"training": inputs} if isinstance(inputs, (str, Path)) else dict(inputs or {})
        request: dict[str, Any] = {
            "TrainingJobName": name,
            "RoleArn": self.role,
            "AlgorithmSpecification": algorithm,
            "HyperParameters": hyperparameters,
            "ResourceConfig": {"InstanceType": self.instance_type, "InstanceCount": self.instance_count,
                               "VolumeSizeInGB": 0},
            "StoppingCondition": {"MaxRuntimeInSeconds": self.max_run},
            "Environment": environment,
        }
        if channels:
            request["InputDataConfig"] = [
                {"ChannelName": channel, "DataSource": {"S3DataSource": {
                    "S3DataType": "S3Prefix", "S3DataDistributionType": "FullyReplicated",
                    "S3Uri": str(Path(str(path).removeprefix("file://")).expanduser().resolve())}}}
                for channel, path in channels.items()
            ]
        if self.output_path:
            request["OutputDataConfig"] = {"S3OutputPath": self.output_path}
        if self.tags:
            request["Tags"] = self.tags
        if self.launcher != "local":
            given = {"Launcher": self.launcher, "RayAddress": self.ray_address, "HostResources": self.host_resources}
            request["TrainmonConfig"] = {key: value for key, value in given.items() if value is not None}
        for rule in self.rules:
            if hasattr(rule, "prepare_actions"):
                rule.prepare_actions(name)  # the SDK's StopTraining learns the job's name
            field, entry = as_request(rule)
            request.setdefault(field, []).append(entry)
        if self.disable_profiler:
            request["ProfilerConfig"] = {"DisableProfiler": True}
        elif self.profiler_config is not None:
            request["ProfilerConfig"] = (self.profiler_config if isinstance(self.profiler_config, dict)
                                         else dict(getattr(self.profiler_config, "_to_request_dict", dict)()))
        return request if self._no_rules else with_profiler_report(request, time.time())  # as the SDK did


__all__ = ["Estimator", "Session", "TrainingJob", "TrainmonError", "UnexpectedStatusException"]
