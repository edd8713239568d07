"""The SageMaker training-container contract, in a per-host directory: seen by the job as itself
(a process of this machine), or as ``/opt/ml`` (a container, the directory mounted there).

    <job dir>/algo-N/input/config/{hyperparameters,resourceconfig,inputdataconfig,debughookconfig}.json
    <job dir>/algo-N/input/data/<channel>/   -> the channel's local path
    <job dir>/algo-N/model/                  packed as model.tar.gz when the job ends
    <job dir>/algo-N/output/                 'failure' here becomes the FailureReason
    <job dir>/algo-N/output/data/            packed as output.tar.gz
    <job dir>/algo-N/output/tensors/         what trainmon.debug records (TRAINMON_TENSOR_DIR), for the rules
    <job dir>/algo-N/code/                   a script-mode job's source (/opt/ml/code), where it runs

plus the environment variables the SageMaker training toolkit sets (SM_*), each path as the job
sees it. A channel that names a local path is linked (for a container, mounted read-only in its
place); one that names objects of trainmon's object store is copied, so the job cannot change them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ...jobs.document import Channel, JobDocument
from . import instances, tensors, toolkit

CONTAINER_ROOT = Path("/opt/ml")
CONTAINER_RENDEZVOUS_PORT = 7777


@dataclass(frozen=True)
class Mount:
    source: str  # on this machine
    target: str  # in the container
    read_only: bool = True


@dataclass(frozen=True)
class HostLayout:
    host: str
    root: Path
    seen_at: Path | None = None  # where the job sees ``root`` (/opt/ml in a container); None: as itself
    mounts: list[Mount] = field(default_factory=list)  # a container's, besides ``root`` at ``seen_at``

    def seen(self, path: Path) -> str:
        """``path``, under ``root``, as the job sees it."""
        return str(self.seen_at / path.relative_to(self.root)) if self.seen_at is not None else str(path)

    @property
    def input_dir(self) -> Path:
        return self.root / "input"

    @property
    def config_dir(self) -> Path:
        return self.root / "input" / "config"

    @property
    def data_dir(self) -> Path:
        return self.root / "input" / "data"

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def output_dir(self) -> Path:
        return self.root / "output"

    @property
    def output_data_dir(self) -> Path:
        return self.root / "output" / "data"

    @property
    def failure_file(self) -> Path:
        return self.output_dir / "failure"

    @property
    def code_dir(self) -> Path:
        return self.root / "code"


def host_names(count: int) -> list[str]:
    return [f"algo-{index}" for index in range(1, count + 1)]


def container_limits(doc: JobDocument) -> instances.Limits | None:
    """The CPUs and memory a container of the job's hosts may use (its instance type's, at most this
    machine's); None: no limits."""
    return instances.container_limits(doc["ResourceConfig"]["InstanceType"], os.cpu_count() or 1,
                                      psutil.virtual_memory().total)


def machine_gpus() -> list[str]:
    """The GPUs this process may use, by the ids containers take (indexes, or UUIDs where
    CUDA_VISIBLE_DEVICES gives them): NVIDIA's, through NVML (``nvidia-ml-py``); none without it."""
    try:
        import pynvml  # optional extra

        pynvml.nvmlInit()
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    return [str(index) for index in range(count)]


def container_gpus(doc: JobDocument, host: str, machine: Sequence[str]) -> list[str]:
    """The GPUs a container host of the job gets of ``machine``'s, those its engine can pass
    (:func:`instances.host_gpus`)."""
    index = host_names(doc["ResourceConfig"]["InstanceCount"]).index(host)
    return instances.host_gpus(doc["ResourceConfig"]["InstanceType"], index, machine)


def prepare_host(job_dir: Path, doc: JobDocument, host: str, peers: Peers, *, seen_at: Path | None = None,
                 gpus: Sequence[str] | None = None) -> tuple[HostLayout, dict[str, str]]:
    """Create one host's directories and config files in ``job_dir`` (which exists: it is private to
    the user, see :func:`trainmon.config.make_private_dir`), its channels and, in script mode, its code
    directory; return them and the SM_* environment, its paths as seen from ``seen_at`` (a
    container's /opt/ml) when given. OSError or :class:`toolkit.SourceError` when the input cannot be
    put in place. ``gpus``: a container's (else the host sees every GPU of the machine)."""
    layout = HostLayout(host, job_dir / host, seen_at)
    seen = layout.seen
    for directory in (layout.config_dir, layout.data_dir, layout.model_dir, layout.output_data_dir):
        directory.mkdir(parents=True, exist_ok=True)
    hosts = host_names(doc["ResourceConfig"]["InstanceCount"])
    interface = peers.interface or interface_of(peers.known_as.get(host) or peers.addresses[host])
    hyperparameters: dict[str, str] = doc.get("HyperParameters", {})
    resource = {
        "current_host": host,
        "current_instance_type": doc["ResourceConfig"]["InstanceType"],
        "current_group_name": "homogeneousCluster",
        "hosts": hosts,
        "instance_groups": [
            {"instance_group_name": "homogeneousCluster", "instance_type": doc["ResourceConfig"]["InstanceType"],
             "hosts": hosts}
        ],
        "network_interface_name": interface,
        "host_addresses": peers.addresses,  # trainmon's: the names in "hosts" resolve nowhere, these do
    }
    channels: dict[str, str] = {}
    input_config: dict[str, Any] = {}
    for channel in doc.get("InputDataConfig", []):
        name = channel["ChannelName"]
        target = layout.data_dir / name
        _place_channel(channel, doc["TrainmonConfig"].get("ChannelPaths", {}).get(name), target, layout)
        channels[name] = seen(target)
        input_config[name] = {
            "TrainingInputMode": doc["AlgorithmSpecification"]["TrainingInputMode"],
            "S3DistributionType": channel.get("DataSource", {}).get("S3DataSource", {}).get(
                "S3DataDistributionType", "FullyReplicated"),
            "RecordWrapperType": "None",
        }
    _write_json(layout.config_dir / "hyperparameters.json", hyperparameters)
    _write_json(layout.config_dir / "resourceconfig.json", resource)
    _write_json(layout.config_dir / "inputdataconfig.json", input_config)
    checkpoints = (doc.get("CheckpointConfig") or {}).get("LocalPath", "/opt/ml/checkpoints")
    if seen_at is not None and doc.get("CheckpointConfig") and Path(checkpoints) != seen_at / "checkpoints":
        (layout.root / "checkpoints").mkdir(exist_ok=True)
        layout.mounts.append(Mount(str(layout.root / "checkpoints"), checkpoints, read_only=False))
    hook_env = tensors.prepare_host(layout.root, layout.config_dir, doc.get("DebugHookConfig"), seen)  # trainmon.debug's

    script = doc["TrainmonConfig"].get("Script")
    split = toolkit.split(hyperparameters)
    decoded = split.user if script is not None else {key: toolkit.decode(value) for key, value in hyperparameters.items()}
    num_cpus = os.cpu_count() or 1
    num_gpus = len(gpus if gpus is not None else machine_gpus())
    limits = container_limits(doc) if seen_at is not None else None
    if limits is not None:  # a container's limit, as the toolkit counts them inside its cgroup
        num_cpus = limits.cpus
    training_env = {
        "job_name": doc["TrainingJobName"],
        "current_host": host,
        "hosts": hosts,
        "hyperparameters": decoded,
        "channel_input_dirs": channels,
        "input_data_config": input_config,
        "resource_config": resource,
        "input_dir": seen(layout.input_dir),
        "input_config_dir": seen(layout.config_dir),
        "model_dir": seen(layout.model_dir),
        "output_dir": seen(layout.output_dir),
        "output_data_dir": seen(layout.output_data_dir),
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "network_interface_name": interface,
        "master_hostname": hosts[0],
        "log_level": 20,
    }
    env = {
        "TRAINING_JOB_NAME": doc["TrainingJobName"],
        "TRAINING_JOB_ARN": doc["TrainingJobArn"],
        "SM_MODEL_DIR": seen(layout.model_dir),
        "SM_OUTPUT_DIR": seen(layout.output_dir),
        "SM_OUTPUT_DATA_DIR": seen(layout.output_data_dir),
        "SM_INPUT_DIR": seen(layout.input_dir),
        "SM_INPUT_CONFIG_DIR": seen(layout.config_dir),
        "SM_CHANNELS": json.dumps(sorted(channels)),
        "SM_HPS": json.dumps(decoded),
        "SM_HOSTS": json.dumps(hosts),
        "SM_CURRENT_HOST": host,
        "SM_CURRENT_INSTANCE_TYPE": doc["ResourceConfig"]["InstanceType"],
        "SM_NUM_CPUS": str(num_cpus),
        "SM_NUM_GPUS": str(num_gpus),
        "SM_NETWORK_INTERFACE_NAME": interface,
        "SM_HOST_ADDRESSES": json.dumps(peers.addresses),
        # torch.distributed's env:// rendezvous, and the toolkit's names for it: the first host's
        # address (a name in SM_HOSTS resolves only inside SageMaker's network) and a free port there
        "SM_MASTER_ADDR": peers.addresses[hosts[0]],
        "SM_MASTER_PORT": str(peers.port),
        "MASTER_ADDR": peers.addresses[hosts[0]],
        "MASTER_PORT": str(peers.port),
        "WORLD_SIZE": str(len(hosts)),
        "RANK": str(hosts.index(host)),
        "SM_RESOURCE_CONFIG": json.dumps(resource),
        "SM_INPUT_DATA_CONFIG": json.dumps(input_config),
        "SM_TRAINING_ENV": json.dumps(training_env),
        "SM_LOG_LEVEL": "20",
        "PYTHONUNBUFFERED": "1",
    }
    for name, path in channels.items():
        env[f"SM_CHANNEL_{name.upper()}"] = path
    if script is None:
        for key, value in hyperparameters.items():
            env[f"SM_HP_{key.upper()}"] = value
    else:
        toolkit.install_source(Path(script["Source"]), layout.code_dir, script["Program"])
        env.update(_script_environment(script["Program"], split, training_env))
    env.update(hook_env)
    interpreter = doc["TrainmonConfig"].get("Interpreter")
    if "AbsentImage" in doc["TrainmonConfig"] and interpreter:  # its python3 and pip3 stand in for the image's
        env["PATH"] = os.pathsep.join(filter(None, (os.path.dirname(interpreter), os.environ.get("PATH", ""))))
    env.update(doc.get("Environment", {}))
    if script is not None:  # the code directory comes first, as the toolkit puts it first on sys.path
        inherited = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", "") if seen_at is None else "")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (seen(layout.code_dir), inherited)))
    return layout, env


def checkpoint_dir(layout: HostLayout, doc: JobDocument) -> Path | None:
    """Where a host's checkpoints are on this machine (None: the job keeps none): a container's in its
    directory, seen at CheckpointConfig.LocalPath; a process's at LocalPath itself when given (in its
    directory when that is under /opt/ml, where the process sees it)."""
    config = doc.get("CheckpointConfig")
    if not config:
        return None
    if layout.seen_at is None and config.get("LocalPath"):
        local = Path(config["LocalPath"])
        if local.is_relative_to(CONTAINER_ROOT):  # where a process sees its own directory
            return layout.root / local.relative_to(CONTAINER_ROOT)
        return local
    return layout.root / "checkpoints"


@dataclass(frozen=True)
class Peers:
    """Where the job's hosts reach each other: each host's address, and a free port on the first
    host for distributed training's rendezvous (MASTER_ADDR, MASTER_PORT)."""

    addresses: dict[str, str]
    port: int
    interface: str | None = None  # the hosts' network interface, when it is not the one holding their address
    # containers on their nodes' own network (a Ray job's): each host's name and the address it is known by
    # there, as entries of every container's hosts file, where ``addresses`` are the names
    known_as: dict[str, str] = field(default_factory=dict)

    @classmethod
    def local(cls, names: list[str]) -> Peers:
        return cls({name: "127.0.0.1" for name in names}, free_port("127.0.0.1"))

    @classmethod
    def named(cls, names: list[str]) -> Peers:
        """Containers on a network of the job's own, each its own machine as SageMaker's hosts are:
        known by name there, on the first interface, with the rendezvous port free on every host."""
        return cls({name: name for name in names}, CONTAINER_RENDEZVOUS_PORT, "eth0")

    @classmethod
    def on_nodes(cls, addresses: dict[str, str], port: int, *, containers: bool) -> Peers:
        """Hosts on machines of their own at these addresses (a Ray job's nodes), with the rendezvous
        port free on the first: as processes, each reached by its node's address; as containers on
        their node's network, by its name, which every container's hosts file gives that address."""
        if not containers:
            return cls(dict(addresses), port)
        return cls({name: name for name in addresses}, port, known_as=dict(addresses))


def free_port(address: str) -> int:
    """A port nothing listens on now (the rendezvous binds it moments later, as torchrun's does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def interface_of(address: str) -> str:
    """The network interface that holds ``address`` on this machine (SM_NETWORK_INTERFACE_NAME); "lo"
    for a loopback address or one no interface holds."""
    for name, entries in psutil.net_if_addrs().items():
        if any(entry.address == address for entry in entries):
            return name
    return "lo"


def _place_channel(channel: Channel, recorded: str | None, target: Path, layout: HostLayout) -> None:
    """A channel's data at ``input/data/<channel>``: a link to a local directory (or a directory
    holding a link to a local file), or for a container a mount in their place; a copy of objects
    from the object store."""
    uri = channel["DataSource"]["S3DataSource"]["S3Uri"]
    source = Path(recorded or uri.removeprefix("file://")).expanduser().resolve()
    if uri.startswith("s3://"):
        target.mkdir(exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target / source.name)
    elif layout.seen_at is not None:
        target.mkdir(exist_ok=True)
        inside = layout.seen(target) if source.is_dir() else layout.seen(target / source.name)
        layout.mounts.append(Mount(str(source), inside))
    elif source.is_dir():
        if not target.exists():
            target.symlink_to(source, target_is_directory=True)
    else:
        target.mkdir(exist_ok=True)
        link = target / source.name
        if not link.exists():
            link.symlink_to(source)


def _script_environment(program: str, split: toolkit.Hyperparameters, training_env: dict[str, Any]) -> dict[str, str]:
    """The variables the toolkit adds for a script-mode entry point (``training_env`` gains its fields)."""
    arguments = toolkit.to_cmd_args(split.user)
    fields = {
        "user_entry_point": program,
        "module_name": toolkit.module_name(program),
        "module_dir": split.sagemaker.get(toolkit.SUBMIT_DIRECTORY, ""),
        "framework_params": split.framework,
        "user_args": arguments,
        "log_level": split.sagemaker.get(toolkit.LOG_LEVEL, 20),
    }
    training_env.update(fields)
    env = {f"SM_{key.upper()}": toolkit.env_value(value) for key, value in fields.items()}
    env["SM_HPS"] = toolkit.env_value(split.user)
    env["SM_TRAINING_ENV"] = toolkit.env_value(training_env)
    env.update({f"SM_HP_{key.upper()}": toolkit.env_value(value) for key, value in split.user.items()})
    env["SAGEMAKER_JOB_NAME"] = toolkit.env_value(split.sagemaker.get(toolkit.JOB_NAME, ""))
    env["SAGEMAKER_REGION"] = toolkit.env_value(split.sagemaker.get(toolkit.REGION, ""))
    return env


def _write_json(path: Path, data: Any) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, indent=2), encoding="utf-8")
    temporary.replace(path)
