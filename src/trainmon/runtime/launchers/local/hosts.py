""":class:`LocalHosts`: a job's hosts captured on this machine, as the supervisor drives them
(:class:`trainmon.runtime.job.hosts.JobHosts`).

The supervisor owns the job (its statuses, stop requests, time limit, rules, final status); the
hosts own everything that happens where a host runs: the container contract, the processes, the
pipes read into a spool, the records and points written to the store, the system monitor, the
failure reason and the model archive. For a local job one :class:`LocalHosts` holds every host;
for a job placed by Ray each node's host agent (:mod:`trainmon.runtime.launchers.ray.hostagent`)
holds a :class:`LocalHosts` of one host, and the supervisor drives them all through the same calls.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .... import config
from ....jobs.document import JobDocument, TrainmonConfig
from ....jobs.status import profiler_settings
from ....parsing.definitions import validate_definitions
from ....parsing.extract import Extractor
from ....parsing.framing import Mode
from ....store import JobRow, Store, StreamRow
from ....store.profiles import ProfileWriter
from ...capture import recovery
from ...capture.ingestor import HostStream, Ingestor, Pipe
from ...capture.loss import LossCounter
from ...capture.pipes import MemoryBudget, PipeOutput, Spooler, start_spool
from ...capture.records import Echo, RecordCutter
from ...capture.spool import now_ms, spool_path
from ...contract import artifacts, checkpoints, tensors, toolkit
from ...contract import layout as contract
from ...job.hosts import FAILURE_REASON_CHARS, HostsEnd
from ...retry import Interrupted, Patience, retrying
from ...watch.gpu import default_gpu_source
from ...watch.monitor import SystemMonitor
from ...watch.profilewatch import ProfileTap
from .. import launcher
from . import launcher as local_launcher
from .container import ContainerLauncher

PIPE_DRAIN_S = 5.0


BACKLOG_NOTICE_BYTES = 32 << 20  # what takes the ingestor about half a second or more: worth a word


@dataclass
class _Host:
    name: str
    layout: contract.HostLayout
    env: dict[str, str]
    process: launcher.Host | None = None
    stream: HostStream | None = None


class LocalHosts:
    """Some hosts of a job (all of a local job's; one on a Ray node), run and captured on this machine."""

    def __init__(self, store: Store, job: JobRow, names: list[str], peers: contract.Peers, *,
                 tag: str | None = None, echo: bool = False, live_metrics: bool = False,
                 environment: dict[str, str] | None = None,
                 interrupted: Callable[[], bool] = lambda: False) -> None:
        self.store = store
        self.job = job.name
        self.job_id = job.id
        self.doc = doc = job.doc
        self.names = names
        self.peers = peers
        self.launcher = _launcher(doc, tag, peers)
        self.tag = self.launcher.tag
        self.environment = environment or {}  # added to every host's
        self.interrupted = interrupted  # the user asked the job to stop: waits for the store end
        settings = doc["TrainmonConfig"]
        self.mode = Mode(settings["RecordMode"])
        self.extractor = Extractor(validate_definitions(doc["AlgorithmSpecification"]["MetricDefinitions"]), self.mode)
        count = doc["ResourceConfig"]["InstanceCount"]
        self.echo = Echo(prefix_hosts=count > 1, live_metrics=live_metrics) if echo else None
        self.job_dir = config.job_dir(store.home, job.name)
        self.spool_dir = recovery.spool_dir(store, job.name)
        self.hosts: list[_Host] = []
        self.spooler: Spooler | None = None
        self._outputs: list[tuple[str, PipeOutput]] = []
        self.ingestor: Ingestor | None = None
        self.monitor: SystemMonitor | None = None
        self._wake = threading.Event()
        self._budget = MemoryBudget()  # output held in memory for lack of a spool, for the whole job

    def place(self) -> str | None:
        return None  # this machine

    def prepare(self) -> str | None:
        whole = len(self.names) == self.doc["ResourceConfig"]["InstanceCount"]
        for stale in self.job_dir.glob("algo-*") if whole else [self.job_dir / h for h in self.names]:
            shutil.rmtree(stale, ignore_errors=True)  # left by an earlier job of the same name
        config.make_private_dir(self.job_dir)
        containers = self.launcher if isinstance(self.launcher, ContainerLauncher) else None
        if containers is not None:
            failure = containers.prepare()
            if failure is not None:
                return failure[:FAILURE_REASON_CHARS]
        try:
            for host in self.names:
                seen_at = contract.CONTAINER_ROOT if containers is not None else None
                gpus = containers.host_gpus(host) if containers is not None else None
                layout, env = contract.prepare_host(self.job_dir, self.doc, host, self.peers, seen_at=seen_at,
                                                    gpus=gpus)
                self.hosts.append(_Host(host, layout, env))
                directory = contract.checkpoint_dir(layout, self.doc)
                if directory is not None:  # what an earlier job left there
                    checkpoints.restore(self.doc["CheckpointConfig"], self.store.home, directory)
                if containers is not None:
                    containers.place(layout)
        except (OSError, toolkit.SourceError) as exc:  # an input gone or changed since the job was created
            reason = f"ClientError: could not prepare the job's input and code: {exc}"
            return reason[:FAILURE_REASON_CHARS]
        failure = artifacts.check(self.doc) if "algo-1" in self.names else None  # where the archives go
        return failure[:FAILURE_REASON_CHARS] if failure else None

    def start(self, profile_tap: ProfileTap | None) -> str | None:
        self.spool_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        failure = self._start_hosts()
        started = [h.stream for h in self.hosts if h.stream is not None]
        self.ingestor = Ingestor(self.store, self.job_id, started, self.extractor, self._wake, self.echo,
                                 budget=self._budget)
        if self.spooler is not None:
            self.spooler.start()
        self.ingestor.start()
        if failure is None:
            self.monitor = self._start_monitor(profile_tap)
        return failure

    def _start_hosts(self) -> str | None:
        """Each host's processes, and the spooler that reads their pipes (started with the ingestor)."""
        spooled: list[tuple[int, PipeOutput, int]] = []
        try:
            return self._launch(spooled)
        finally:
            self.spooler = Spooler(spooled, self.tag) if spooled else None

    def _launch(self, spooled: list[tuple[int, PipeOutput, int]]) -> str | None:
        settings = self.doc["TrainmonConfig"]
        script = settings.get("Script")
        for host in self.hosts:
            layout = host.layout
            try:
                row = retrying(functools.partial(self._add_stream, host.name), self.interrupted)
            except Interrupted:
                return None  # stopped while the store was away: the hosts started so far are stopped
            opt_ml = None if isinstance(self.launcher, ContainerLauncher) else str(layout.root)
            spec = launcher.HostSpec(host.name, settings["Command"], {**host.env, **self.environment},
                                     _working_directory(settings, layout), opt_ml)
            try:
                host.process = self.launcher.start(spec)
            except launcher.LaunchError as exc:
                return f"ClientError: {exc}"
            notes = toolkit.notes(layout.code_dir, settings.get("Interpreter"), settings.get("AbsentImage"),
                                  script is not None)
            if isinstance(self.launcher, ContainerLauncher):
                notes += self.launcher.note.encode("utf-8", "replace")
            pipes = []
            for is_stderr, fd in zip((False, True), host.process.streams(), strict=True):
                output = PipeOutput(spool_path(self.spool_dir, host.name, is_stderr), self._wake, budget=self._budget,
                                    losses=LossCounter(self.extractor.definitions, self.mode))
                offset = start_spool(output, b"" if is_stderr else notes)
                spooled.append((fd, output, offset))
                self._outputs.append((host.name, output))
                pipes.append(Pipe(output, RecordCutter(self.mode), is_stderr))
            host.stream = HostStream(host.name, row.id, pipes)
        return None

    def _add_stream(self, host: str) -> StreamRow:
        creation_ms = now_ms()
        return self.store.add_stream(self.job_id, host, f"{self.job}/{host}-{creation_ms // 1000}", creation_ms)

    def _start_monitor(self, tap: ProfileTap | None) -> SystemMonitor | None:
        if not self.hosts:
            return None
        settings = profiler_settings(self.doc)
        profiler = ProfileWriter(settings["S3OutputPath"], self.job) if settings else None
        env = {**os.environ, **self.doc.get("Environment", {})}
        if isinstance(self.launcher, ContainerLauncher):  # the GPUs its containers were given
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.launcher.gpus())
        monitor = SystemMonitor(
            self.store, self.job, self.launcher.process_groups(), self.job_dir,
            system_interval_s=self.doc["TrainmonConfig"].get("SystemMetricsIntervalSeconds", 60),
            profile_interval_ms=settings.get("ProfilingIntervalInMilliseconds") if settings else None,
            profiler=profiler, gpu=default_gpu_source(env),
            tap=tap.put if tap is not None and profiler is not None else None,
        )
        monitor.start()
        return monitor

    def poll(self) -> dict[str, int | None]:
        return {h.name: h.process.poll() if h.process is not None else None for h in self._started()}

    def signal(self, sig: int) -> None:
        self.launcher.signal(sig)

    def running(self) -> bool:
        return self.launcher.running()

    def wait(self) -> dict[str, int]:
        return {h.name: h.process.wait() for h in self._started() if h.process is not None}

    def tensor_files(self) -> dict[str, Path]:
        return {host: tensors.tensor_file(self.store.home, self.job, host) for host in self.names}

    def stored_through(self) -> int | None:
        return self.ingestor.stored_through_ms if self.ingestor is not None else None

    def last_read(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for host, output in self._outputs:
            try:
                found[host] = max(found.get(host, 0.0), os.stat(output.spool_path).st_mtime)
            except OSError:
                pass
        return found

    def finish(self, patience: Patience | None = None) -> HostsEnd:
        end = HostsEnd()
        self.launcher.close()  # what the hosts ran in (a container) goes with them, before the job's end is told
        if self.monitor is not None:
            self.monitor.stop()
            failed = (self.monitor.error, self.monitor.profiler.failed if self.monitor.profiler else None)
            end.warnings = [f"system monitoring: {problem}; the job itself was not affected" for problem in failed
                            if problem]
        end.warnings += self._save_checkpoints()
        # What the pipes still hold, for at most PIPE_DRAIN_S: a pipe kept open by a process beyond
        # trainmon's reach is abandoned, not waited for.
        if self.spooler is not None:
            self.spooler.join(PIPE_DRAIN_S)
        if self.ingestor is not None:
            waiting = self.ingestor.waiting_bytes()
            if waiting >= BACKLOG_NOTICE_BYTES:
                print(f"trainmon: the job has ended; storing the {waiting / 1e6:,.0f} MB of its output still waiting "
                      "in the spool", file=sys.stderr, flush=True)
            self.ingestor.finish(patience)
            self.ingestor.close()
            if self.ingestor.failure is not None:
                end.ingest_failure = str(self.ingestor.failure)
            end.loss.add(self.ingestor.loss)
            end.left = self.ingestor.left
        for _, output in self._outputs:
            end.loss.add(output.losses.loss)
        if not end.left:
            shutil.rmtree(self.spool_dir, ignore_errors=True)  # all stored, or counted as lost: nothing to recover
        return end

    def _save_checkpoints(self) -> list[str]:
        """Each host's checkpoints copied to CheckpointConfig.S3Uri; what could not be, as warnings."""
        config = self.doc.get("CheckpointConfig")
        if not config:
            return []
        problems = []
        for host in self.hosts:
            directory = contract.checkpoint_dir(host.layout, self.doc)
            try:
                if directory is not None:
                    checkpoints.save(config, self.store.home, directory)
            except OSError as exc:
                problems.append(f"checkpoints: {host.name}'s could not be kept at {config['S3Uri']}: {exc}; they "
                                f"are still in {directory}")
        return problems

    def failure_reason(self, host: str, code: int) -> str:
        found = next(h for h in self.hosts if h.name == host)
        failure_file = found.layout.failure_file
        if failure_file.is_file():
            text = failure_file.read_text(encoding="utf-8", errors="replace")
            if text.strip():
                return text[:FAILURE_REASON_CHARS]
        if code < 0:
            try:
                how = f"was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        head = f"AlgorithmError: {host} {how}."
        tail = "\n".join(found.stream.stderr_tail) if found.stream is not None else ""
        if not tail:
            return head
        room = FAILURE_REASON_CHARS - len(head) - len(" Last lines of stderr:\n")
        if len(tail) > room:
            tail = "…" + tail[-(room - 1):]
        return f"{head} Last lines of stderr:\n{tail}"

    def pack(self, doc: JobDocument) -> None:
        """model/ -> model.tar.gz (and output/data -> output.tar.gz) of the first host (runtime.contract.artifacts)."""
        if self.hosts and self.hosts[0].name == "algo-1":
            first = self.hosts[0].layout
            artifacts.pack(doc, self.store.home, first.model_dir, first.output_data_dir)

    def close(self) -> None:
        self.launcher.close()

    def _started(self) -> list[_Host]:
        return [h for h in self.hosts if h.process is not None]


def _working_directory(settings: TrainmonConfig, layout: contract.HostLayout) -> str:
    """Where a host's command starts: a script in its code directory, the entry point of a framework
    image that is not here in the host's directory (the image's /opt/ml), any other where the job
    was created (TrainmonConfig.WorkingDirectory)."""
    if "Script" in settings:
        return str(layout.code_dir)
    if "AbsentImage" in settings:
        return str(layout.root)
    return settings.get("WorkingDirectory") or str(layout.root)


def _launcher(doc: JobDocument, tag: str | None, peers: contract.Peers) -> local_launcher.LocalLauncher:
    """The hosts as processes, or as containers of the job's image."""
    image = doc["TrainmonConfig"].get("Image")
    if image is None:
        return local_launcher.LocalLauncher(tag)
    return ContainerLauncher(doc, tag=tag, peers=peers)
