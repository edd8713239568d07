"""Hosts as containers of this machine: :class:`ContainerLauncher` runs each host's command in the
job's image, with the host's directory mounted at ``/opt/ml`` (SageMaker's container contract).

A host is created first (``create``: its name, labels, mounts, network, limits), then started
attached (``start --attach``): that client process is the host's main process as far as the rest
of trainmon knows: its stdout and stderr are the container's, on pipes read by the spooler as a
process's are (no log driver in the path: the engine keeps no copy), and its exit status is the
container's. Signals go to the container through the engine (``kill --signal``), since the
container's processes are not the client's children; the client's own signals are not passed on
(``--sig-proxy=false``), so a stop reaches the job once. Every container carries the label
``trainmon.tag`` with the job's process tag, by which :meth:`close` and the reaper
(:mod:`trainmon.runtime.job.orphans`) remove what a job left, and the tag in its environment too.
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING

from ...containers.engine import JOB_LABEL, TAG_LABEL, Engine, EngineError, find
from ...containers.image import parse as parse_reference
from ...contract.instances import instance_gpus
from ...contract.layout import CONTAINER_ROOT, HostLayout, Peers, container_gpus, container_limits, machine_gpus
from ...processes.tags import TAG_VARIABLE
from ..launcher import HostSpec, LaunchError
from .launcher import LocalHost, LocalLauncher

if TYPE_CHECKING:
    from ....jobs.document import JobDocument

STATE_WAIT_S = 5.0  # for a started container's process to appear, for the system monitor


class ContainerLauncher(LocalLauncher):
    """Each host of the job a container of its image (``TrainmonConfig.Image``)."""

    def __init__(self, doc: JobDocument, *, tag: str | None = None, peers: Peers | None = None) -> None:
        super().__init__(tag)
        settings = doc["TrainmonConfig"]
        self.image = settings["Image"]["Reference"]
        self.entrypoint = settings["Image"].get("Entrypoint", [])
        self.job = doc["TrainingJobName"]
        self.workdir = str(CONTAINER_ROOT / "code") if settings.get("Script") else None
        self.isolated = doc.get("EnableNetworkIsolation", False)
        # hosts on machines of their own (a Ray job's nodes) are on their node's network, each known to the
        # others by name through hosts entries; here, several hosts get a network of the job's own where each
        # is known by its name, cut off from all else when isolated; one host alone is on the engine's
        # default network, or on none when isolated
        self.known_as = peers.known_as if peers is not None else {}
        several = doc["ResourceConfig"]["InstanceCount"] > 1 and not self.known_as
        self.network = f"trainmon-{self.job}-{self.tag[:8]}" if several else None
        self.engine: Engine | None = None
        self.layouts: dict[str, HostLayout] = {}
        self.containers: dict[str, str] = {}  # host -> container id
        self._network_made = False
        self._addresses: dict[str, str] = {}  # each host's on the job's network
        self.hosts_count = doc["ResourceConfig"]["InstanceCount"]
        self.limits = container_limits(doc)
        self.doc = doc
        self.machine_gpus: list[str] = []  # those of this machine's GPUs the engine can pass (prepare)
        self.note = ""  # what the job's log says first of how it runs (GPUs the engine could not pass)

    def prepare(self) -> str | None:
        """The engine found, the image ready (pulled if need be) and the GPUs the hosts get known; the
        job's failure reason if not."""
        try:
            self.engine = engine = find()
            reference = parse_reference(self.image)
            assert reference is not None, "a job's image was checked when the job was made"
            engine.check_runnable(engine.ensure(reference))
            self.machine_gpus = self._passable_gpus(engine)
        except EngineError as exc:
            return f"ClientError: {exc}"
        return None

    def _passable_gpus(self, engine: Engine) -> list[str]:
        """This machine's GPUs, when the engine can pass them; none when it cannot and the instance type
        does not ask for GPUs (``local``: the job runs without them, and its log says why); EngineError
        when the type asks for them."""
        machine = machine_gpus()
        unusable = engine.gpus_unusable() if machine else None
        if unusable is None:
            return machine
        instance_type = self.doc["ResourceConfig"]["InstanceType"]
        if instance_gpus(instance_type):
            raise EngineError(f"{instance_type} has GPUs, and {unusable}.")
        self.note = f"trainmon: this machine's GPUs are not given to the job's containers: {unusable}\n"
        return []

    def host_gpus(self, host: str) -> list[str]:
        """The GPUs the host's container gets."""
        return container_gpus(self.doc, host, self.machine_gpus)

    def place(self, layout: HostLayout) -> None:
        """The host's directory and mounts (from :func:`~trainmon.runtime.contract.layout.prepare_host`)."""
        self.layouts[layout.host] = layout

    def gpus(self) -> list[str]:
        """Every GPU a host of the job gets, once each: those the system monitor reads."""
        return sorted({gpu for host in self.layouts for gpu in self.host_gpus(host)})

    def start(self, spec: HostSpec) -> LocalHost:
        engine = self.engine
        assert engine is not None, "prepare() first"
        try:
            if self.network is not None and not self._network_made:
                free = engine.create_network(self.network, internal=self.isolated, tag=self.tag)
                self._network_made = True
                self._addresses = {f"algo-{i}": free[i - 1] for i in range(1, self.hosts_count + 1)}
            environment = {**spec.env, TAG_VARIABLE: self.tag}  # the engine passes them on by name
            created = engine.call(self._create_args(engine, spec, environment), env={**os.environ, **environment})
        except EngineError as exc:
            raise LaunchError(f"cannot create {spec.name}'s container: {exc}") from None
        container = created.stdout.strip()
        self.containers[spec.name] = container
        attach = HostSpec(spec.name, [engine.path, "start", "--attach", "--sig-proxy=false", container],
                          {}, spec.cwd)
        return super().start(attach)

    def _create_args(self, engine: Engine, spec: HostSpec, environment: dict[str, str]) -> list[str]:
        layout = self.layouts[spec.name]
        args = ["create", "--rm", "--name", f"trainmon-{self.job}-{spec.name}-{self.tag[:8]}",
                "--label", f"{TAG_LABEL}={self.tag}", "--label", f"{JOB_LABEL}={self.job}",
                "--hostname", spec.name, "--log-driver", "none", "--interactive=false",
                "--volume", f"{layout.root}:{CONTAINER_ROOT}", *engine.limits()]
        if self.limits is not None:
            memory = f"{self.limits.memory_bytes}b"  # and no swap beyond it: an instance has none
            args += ["--cpus", str(self.limits.cpus), "--memory", memory, "--memory-swap", memory]
        args += engine.gpu_arguments(self.host_gpus(spec.name))
        for mount in layout.mounts:
            args += ["--volume", f"{mount.source}:{mount.target}{':ro' if mount.read_only else ''}"]
        if self.network is not None:
            args += ["--network", self.network, "--ip", self._addresses[spec.name]]
            args += [f"--add-host={host}:{address}" for host, address in self._addresses.items() if host != spec.name]
        elif self.isolated:
            args += ["--network", "none"]
        elif self.known_as:
            args += ["--network", "host", *(f"--add-host={host}:{address}" for host, address in self.known_as.items())]
        for name in environment:  # the value from the engine's environment: none on a command line
            args += ["--env", name]
        if self.entrypoint:
            args += ["--entrypoint", self.entrypoint[0]]
        if self.workdir is not None:
            args += ["--workdir", self.workdir]
        args += [self.image, *self.entrypoint[1:], *spec.command]
        return args

    def signal(self, sig: int) -> None:
        name = signal.Signals(sig).name.removeprefix("SIG")
        for container in self.containers.values():
            assert self.engine is not None
            self.engine.kill(container, name)
        if sig == signal.SIGKILL:
            super().signal(sig)  # the attached clients too

    def running(self) -> bool:
        engine = self.engine
        return super().running() or engine is not None and any(engine.state(c)[0] for c in self.containers.values())

    def process_groups(self) -> dict[str, int]:
        """Each container's main process: the leader of its processes' group on this machine."""
        found = {host: self._main_process(host, container) for host, container in self.containers.items()}
        return {host: pid for host, pid in found.items() if pid}

    def _main_process(self, host: str, container: str) -> int:
        """The container's main process id, once the client has started it (0: it has ended, or never ran)."""
        client = next(h for h in self.hosts if h.name == host)
        deadline = time.monotonic() + STATE_WAIT_S
        while True:
            assert self.engine is not None
            _, pid = self.engine.state(container)
            if pid or client.poll() is not None or time.monotonic() > deadline:
                return pid
            time.sleep(0.05)

    def close(self) -> None:
        super().close()
        if self.engine is not None:
            self.engine.remove_tagged(self.tag)
            if self._network_made and self.network is not None:
                self.engine.remove_network(self.network)
                self._network_made = False
