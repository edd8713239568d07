"""One process owns one job: it starts the hosts, wires capture to the store, and ends the job.

Run in the foreground by ``trainmon run``, or detached (``python -m trainmon.runtime.supervisor NAME``)
by ``create_training_job``. Stop requests arrive through the store (``trainmon stop`` from any
terminal), as SIGINT (Ctrl-C) or SIGTERM; each host's whole process group gets SIGTERM, then
SIGKILL after the grace period.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import config
from ..errors import StoreError, TrainmonError
from ..jobs.document import JobDocument, SupervisorIdentity
from ..jobs.status import profiler_settings, transition
from ..parsing.definitions import validate_definitions
from ..parsing.extract import Extractor
from ..parsing.framing import Mode
from ..store import JobRow, Store, open_store
from ..store.profiles import ProfileWriter
from . import contract, orphans
from .capture import Echo, HostStream, Ingestor, Pipe, PipeReader, RecordCutter
from .jobstate import set_status
from .maintenance import Maintainer
from .monitor import SystemMonitor
from .sampler import default_gpu_source

POLL_S = 0.05
STOP_POLL_S = 0.25
ORPHAN_GRACE_S = 2.0
PIPE_DRAIN_S = 5.0
FAILURE_REASON_CHARS = 1024


@dataclass
class Host:
    name: str
    layout: contract.HostLayout
    process: subprocess.Popen[bytes]
    stream: HostStream

    @property
    def pgid(self) -> int:
        return self.process.pid


class Supervisor:
    def __init__(
        self,
        store: Store,
        name: str,
        *,
        echo: bool = True,
        live_metrics: bool = False,
        handle_signals: bool = True,
    ) -> None:
        self.store = store
        self.name = name
        self.echo_enabled = echo
        self.live_metrics = live_metrics
        self.handle_signals = handle_signals
        self.hosts: list[Host] = []
        self._stop_reason: str | None = None  # "Stopped" | "MaxRuntimeExceeded"
        self._interrupts = 0
        self._wake = threading.Event()
        self.first_failure: str | None = None

    # -- the whole life of a job ------------------------------------------------------------

    def run(self) -> JobRow:
        job = self.store.get_job(self.name)
        if job is None:
            raise TrainmonError(f"no job named {self.name!r} to supervise")
        identity = orphans.identity()

        def claim(row: JobRow) -> None:
            row.supervisor = identity

        self.store.update_job(self.name, claim)
        previous = self._install_signals()
        try:
            return self._run(job, identity)
        finally:
            self._restore_signals(previous)

    def _run(self, job: JobRow, identity: SupervisorIdentity) -> JobRow:
        doc = job.doc
        settings = doc["TrainmonConfig"]
        mode = Mode(settings["RecordMode"])
        grace_s = float(settings["StopGraceSeconds"])
        extractor = Extractor(validate_definitions(doc["AlgorithmSpecification"]["MetricDefinitions"]), mode)
        job_dir = config.jobs_dir(self.store.home) / self.name
        count = doc["ResourceConfig"]["InstanceCount"]

        set_status(self.store, self.name, "Downloading")
        for stale in job_dir.glob("algo-*"):  # left by an earlier job of the same name
            shutil.rmtree(stale, ignore_errors=True)
        prepared = [contract.prepare_host(job_dir, doc, host) for host in contract.host_names(count)]
        requested = self.store.get_job(self.name)
        if requested is not None and requested.stop_requested:
            self._stop_reason = requested.stop_requested  # stopped before it started: start nothing
            return self._finish(self._stop_reason)
        spool_dir = job_dir / ".spool"
        spool_dir.mkdir(parents=True, exist_ok=True)

        start_failure = self._start_hosts(job, prepared, spool_dir, mode)
        identity["pgids"] = [host.pgid for host in self.hosts]
        self.store.update_job(self.name, lambda row: setattr(row, "supervisor", identity))
        if start_failure is None:
            set_status(self.store, self.name, "Training")

        echo = Echo(prefix_hosts=count > 1, live_metrics=self.live_metrics) if self.echo_enabled else None
        ingestor = Ingestor(self.store, job.id, [h.stream for h in self.hosts], extractor, self._wake, echo)
        for host in self.hosts:
            for pipe in host.stream.pipes:
                pipe.reader.start()
        ingestor.start()

        monitor = self._start_monitor(doc, job_dir) if start_failure is None else None
        maintainer = Maintainer(self.store)
        maintainer.start()
        exit_codes = {}
        if start_failure is None:
            deadline = doc["CreationTime"] + doc["StoppingCondition"]["MaxRuntimeInSeconds"]
            exit_codes = self._watch(deadline, grace_s)
        else:
            self._terminate(grace_s)
        self._end_leftovers()
        if monitor is not None:
            self._stop_monitor(monitor)
        maintainer.stop()
        self._drain(ingestor)
        final = self._conclude(job, exit_codes, start_failure, ingestor)
        if ingestor.unsaved is not None:
            records, points = ingestor.unsaved
            cause = ingestor.store_error.message if ingestor.store_error else "the store refused the writes"
            raise StoreError(
                f"{cause}. The job ended {final.status}, but its last {records} log records and {points} "
                "points could not be stored."
            )
        return final

    def _start_hosts(
        self, job: JobRow, prepared: list[tuple[contract.HostLayout, dict[str, str]]], spool_dir: Path, mode: Mode
    ) -> str | None:
        command = job.doc["TrainmonConfig"]["Command"]
        for layout, env in prepared:
            creation_ms = int(time.time() * 1000)
            stream = self.store.add_stream(
                job.id, layout.host, f"{self.name}/{layout.host}-{creation_ms // 1000}", creation_ms
            )
            try:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env={**os.environ, **env},
                    cwd=job.doc["TrainmonConfig"].get("WorkingDirectory") or layout.root,
                    start_new_session=True,
                )
            except OSError as exc:
                return (
                    f"ClientError: cannot start {command[0]!r} on {layout.host}: {exc.strerror or exc}. "
                    "Check the command and that it is on PATH or given with its path."
                )
            pipes = []
            for is_stderr, source in ((False, process.stdout), (True, process.stderr)):
                assert source is not None
                fd = os.dup(source.fileno())
                source.close()
                _widen_pipe(fd)
                label = f"{layout.host}-{'stderr' if is_stderr else 'stdout'}"
                reader = PipeReader(fd, spool_dir / label, self._wake, label)
                pipes.append(Pipe(reader, RecordCutter(mode), is_stderr))
            host_stream = HostStream(layout.host, stream.id, pipes)
            self.hosts.append(Host(layout.host, layout, process, host_stream))
        return None

    def _start_monitor(self, doc: JobDocument, job_dir: Path) -> SystemMonitor | None:
        if not self.hosts:
            return None
        settings = profiler_settings(doc)
        profiler = ProfileWriter(settings["S3OutputPath"], self.name) if settings else None
        env = {**os.environ, **doc.get("Environment", {})}
        monitor = SystemMonitor(
            self.store, self.name, {h.name: h.pgid for h in self.hosts}, job_dir,
            system_interval_s=doc["TrainmonConfig"].get("SystemMetricsIntervalSeconds", 60),
            profile_interval_ms=settings["ProfilingIntervalInMilliseconds"] if settings else None,
            profiler=profiler, gpu=default_gpu_source(env),
        )
        monitor.start()
        return monitor

    @staticmethod
    def _stop_monitor(monitor: SystemMonitor) -> None:
        monitor.stop()
        problems = [str(p) for p in (monitor.error, monitor.profiler.failed if monitor.profiler else None) if p]
        for problem in problems:
            print(f"trainmon: warning: system monitoring: {problem}; the job itself was not affected",
                  file=sys.stderr)

    def _watch(self, deadline: float, grace_s: float) -> dict[str, int]:
        """Wait for every host; act on failures, stop requests and the runtime limit."""
        next_stop_poll = 0.0
        while True:
            codes = {h.name: h.process.poll() for h in self.hosts}
            if all(code is not None for code in codes.values()):
                return {name: code for name, code in codes.items() if code is not None}
            failing = [name for name, code in codes.items() if code not in (None, 0)]
            if failing:
                self.first_failure = failing[0]
                self._terminate(grace_s)  # one host failed: the job fails, the others end
                return {h.name: h.process.wait() for h in self.hosts}
            now = time.time()
            if self._interrupts and self._stop_reason is None:
                self._request_stop("Stopped")
            if now >= deadline and self._stop_reason is None:
                self._request_stop("MaxRuntimeExceeded")
            if now >= next_stop_poll and self._stop_reason is None:
                next_stop_poll = now + STOP_POLL_S
                row = self.store.get_job(self.name)
                if row is not None and row.stop_requested:
                    self._stop_reason = row.stop_requested
            if self._stop_reason is not None:
                self._terminate(grace_s)
                return {h.name: h.process.wait() for h in self.hosts}
            time.sleep(POLL_S)

    def _request_stop(self, reason: str) -> None:
        self._stop_reason = reason
        message = "Stopping the training job: MaxRuntimeInSeconds reached" if reason == "MaxRuntimeExceeded" else None

        def mutate(row: JobRow) -> None:
            if row.doc["TrainingJobStatus"] == "InProgress":
                transition(row.doc, "Stopping", time.time(), message)
            row.stop_requested = reason

        self.store.update_job(self.name, mutate)

    def _terminate(self, grace_s: float) -> None:
        """SIGTERM to every host's process group, SIGKILL to whatever is left after the grace."""
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if all(h.process.poll() is not None for h in self.hosts) and not self._groups_alive():
                return
            if self._interrupts > 1:
                break  # a second Ctrl-C: no more waiting
            time.sleep(POLL_S)
        self._signal_all(signal.SIGKILL)
        for host in self.hosts:
            host.process.wait()

    def _end_leftovers(self) -> None:
        """Children that outlived their host's main process go too, as when a container exits."""
        if not self._groups_alive():
            return
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + ORPHAN_GRACE_S
        while time.monotonic() < deadline and self._groups_alive():
            time.sleep(POLL_S)
        self._signal_all(signal.SIGKILL)

    def _signal_all(self, sig: signal.Signals) -> None:
        for host in self.hosts:
            try:
                os.killpg(host.pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _groups_alive(self) -> bool:
        for host in self.hosts:
            try:
                os.killpg(host.pgid, 0)
                return True
            except (ProcessLookupError, PermissionError):
                continue
        return False

    def _drain(self, ingestor: Ingestor) -> None:
        for host in self.hosts:
            for pipe in host.stream.pipes:
                pipe.reader.join(PIPE_DRAIN_S)  # a process that escaped its group may hold a pipe open
        ingestor.finish()
        ingestor.close()

    # -- the end ------------------------------------------------------------------------------

    def _conclude(
        self, job: JobRow, exit_codes: dict[str, int], start_failure: str | None, ingestor: Ingestor
    ) -> JobRow:
        if ingestor.failure is not None and start_failure is None and not self._stop_reason:
            start_failure = f"InternalServerError: trainmon could not store the job's output: {ingestor.failure}"
        if start_failure is not None:
            return self._finish("Failed", FailureReason=start_failure[:FAILURE_REASON_CHARS])
        if self._stop_reason is not None:
            self._pack(job)
            return self._finish(self._stop_reason)
        failed = sorted((h for h in self.hosts if exit_codes.get(h.name, 0) != 0),
                        key=lambda h: h.name != self.first_failure)  # the host that failed first, not one we ended
        if failed:
            return self._finish("Failed", FailureReason=self._failure_reason(failed[0], exit_codes[failed[0].name]))
        set_status(self.store, self.name, "Uploading")
        try:
            self._pack(job)
        except OSError as exc:
            return self._finish("Failed", FailureReason=f"ClientError: could not pack the model artifacts: {exc}")
        return self._finish("Completed")

    def _finish(self, status: str, **fields: Any) -> JobRow:
        for attempt in range(20):
            try:
                return set_status(self.store, self.name, status, **fields)
            except StoreError:
                if attempt == 19:
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def _failure_reason(self, host: Host, code: int) -> str:
        failure_file = host.layout.failure_file
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
        head = f"AlgorithmError: {host.name} {how}."
        tail = "\n".join(host.stream.stderr_tail)
        if not tail:
            return head
        room = FAILURE_REASON_CHARS - len(head) - len(" Last lines of stderr:\n")
        if len(tail) > room:
            tail = "…" + tail[-(room - 1):]
        return f"{head} Last lines of stderr:\n{tail}"

    def _pack(self, job: JobRow) -> None:
        """model/ -> model.tar.gz (and output/data -> output.tar.gz) of the first host."""
        if not self.hosts:
            return
        artifacts = job.doc["ModelArtifacts"]["S3ModelArtifacts"]
        target = Path(artifacts[len("file://"):])
        target.parent.mkdir(parents=True, exist_ok=True)
        first = self.hosts[0].layout
        _tar(first.model_dir, target)
        if first.output_data_dir.is_dir() and any(first.output_data_dir.iterdir()):
            _tar(first.output_data_dir, target.with_name("output.tar.gz"))

    # -- signals ------------------------------------------------------------------------------

    def _install_signals(self) -> dict[int, Any]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: Any) -> None:
            self._interrupts += 1
            if self._interrupts == 1:
                print("\ntrainmon: stopping the job (SIGTERM to its processes; Ctrl-C again to kill them now)",
                      file=sys.stderr)

        return {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

    @staticmethod
    def _restore_signals(previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _widen_pipe(fd: int) -> None:
    """A 1 MiB pipe buffer (Linux) lets the job keep writing through a brief pause of the reader."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):
        pass


def _tar(source: Path, target: Path) -> None:
    temporary = target.with_name(target.name + ".part")
    with tarfile.open(temporary, "w:gz") as archive:
        for entry in sorted(source.iterdir()):
            archive.add(entry, arcname=entry.name)
    temporary.replace(target)


def main(argv: list[str] | None = None) -> int:
    """Detached supervisor, started by ``create_training_job``."""
    parser = argparse.ArgumentParser(prog="python -m trainmon.runtime.supervisor")
    parser.add_argument("name")
    parser.add_argument("--home", type=Path)
    args = parser.parse_args(argv)
    store = open_store(args.home)
    Supervisor(store, args.name, echo=False).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
