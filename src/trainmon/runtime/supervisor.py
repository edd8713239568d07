"""One process owns one job: it starts the hosts, wires capture to the store, and ends the job.

Run in the foreground by ``trainmon run``, or detached (``python -m trainmon.runtime.supervisor
NAME``) by ``create_training_job``. Stop requests arrive through the store (``trainmon stop`` from
any terminal), as SIGINT (Ctrl-C) or SIGTERM; every process of the job gets SIGTERM, then SIGKILL
after the grace period. SIGHUP (a terminal that went away) is ignored: the job goes on, captured,
and the echo to the terminal ends.

Hosts are started and signalled through a :class:`~trainmon.runtime.launcher.Launcher`. When the
main process of every host has exited, whatever they left running is ended (as when a container
exits), and capture ends after a bounded drain, so a process that holds a pipe open cannot hold
the job. Monitoring never ends the job: the store may be unreachable for any length of time
(:class:`~trainmon.runtime.jobstate.JobState` and the ingestor write everything when it is
back), and a failing system monitor or profiler is reported, not fatal.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from .. import config
from ..errors import StoreError, TrainmonError
from ..jobs.document import JobDocument
from ..jobs.status import profiler_settings
from ..parsing.definitions import validate_definitions
from ..parsing.extract import Extractor
from ..parsing.framing import Mode
from ..rules.catalog import PROFILER_RULES
from ..store import JobRow, Store, StreamRow, objects, open_store
from ..store.profiles import ProfileWriter
from . import contract, notify, orphans, recovery, toolkit
from . import launcher as launch
from .capture import (
    Echo,
    HostStream,
    Ingestor,
    Loss,
    LossCounter,
    MemoryBudget,
    Pipe,
    PipeReader,
    RecordCutter,
    now_ms,
    spool_path,
)
from .jobstate import JobState
from .maintenance import Maintainer
from .monitor import SystemMonitor
from .profilewatch import ProfileTap
from .retry import Backoff
from .rulewatch import RuleWatcher, evaluated_rules
from .sampler import default_gpu_source

POLL_S = 0.05
STOP_POLL_S = 0.25
ORPHAN_GRACE_S = 2.0
PIPE_DRAIN_S = 5.0
REPORT_TIMEOUT_S = 600.0  # the profiling report, after the job's final status: its time, bounded
FAILURE_REASON_CHARS = 1024


@dataclass
class Host:
    name: str
    layout: contract.HostLayout
    process: launch.Host
    stream: HostStream


class Supervisor:
    def __init__(
        self,
        store: Store,
        name: str,
        *,
        echo: bool = True,
        live_metrics: bool = False,
        handle_signals: bool = True,
        launcher: launch.Launcher | None = None,
    ) -> None:
        self.store = store
        self.name = name
        self.echo_enabled = echo
        self.live_metrics = live_metrics
        self.handle_signals = handle_signals
        self.hosts: list[Host] = []
        self.readers: list[PipeReader] = []
        self.launcher = launcher or launch.LocalLauncher()
        self.state = JobState(store, name)
        self.loss = Loss()
        self._stop_reason: str | None = None  # "Stopped" | "MaxRuntimeExceeded"
        self._stop_message: str | None = None  # what the final status says, when a rule stopped the job
        self._rule_stop: str | None = None  # set by the rules' thread: a StopTraining action fired
        self._interrupts = 0
        self._wake = threading.Event()
        self.first_failure: str | None = None
        self.ended_at: float | None = None
        self._profile_tap: ProfileTap | None = None  # the monitor's profile rows, for the profiler rules

    # -- the whole life of a job ------------------------------------------------------------

    def run(self) -> JobRow:
        job = self.store.get_job(self.name)
        if job is None:
            raise TrainmonError(f"no job named {self.name!r} to supervise")
        identity = orphans.identity(tag=self.launcher.tag)

        def claim(row: JobRow) -> None:
            row.supervisor = identity

        self.store.update_job(self.name, claim)
        previous = self._install_signals()
        try:
            return self._run(job)
        finally:
            self._restore_signals(previous)
            self.launcher.close()
            notify.flush()  # the rules' notifications still under way get their time (none: at once)

    def _run(self, job: JobRow) -> JobRow:
        doc = job.doc
        settings = doc["TrainmonConfig"]
        mode = Mode(settings["RecordMode"])
        grace_s = float(settings["StopGraceSeconds"])
        extractor = Extractor(validate_definitions(doc["AlgorithmSpecification"]["MetricDefinitions"]), mode)
        job_dir = config.job_dir(self.store.home, self.name)
        count = doc["ResourceConfig"]["InstanceCount"]

        self.state.enter("Downloading")
        for stale in job_dir.glob("algo-*"):  # left by an earlier job of the same name
            shutil.rmtree(stale, ignore_errors=True)
        config.make_private_dir(job_dir)
        try:
            prepared = [contract.prepare_host(job_dir, doc, host) for host in contract.host_names(count)]
        except (OSError, toolkit.SourceError) as exc:  # an input gone or changed since the job was created
            reason = f"ClientError: could not prepare the job's input and code: {exc}"
            return self._finish("Failed", FailureReason=reason[:FAILURE_REASON_CHARS])
        requested = self.state.stop_requested()
        if requested:
            self._stop_reason = requested  # stopped before it started: start nothing
            return self._finish(requested)
        spool_dir = recovery.spool_dir(self.store, self.name)
        spool_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

        budget = MemoryBudget()  # output held in memory for lack of a spool, for the whole job
        start_failure = self._start_hosts(job, prepared, spool_dir, mode, extractor, budget)
        if start_failure is None:
            self.state.enter("Training")

        echo = Echo(prefix_hosts=count > 1, live_metrics=self.live_metrics) if self.echo_enabled else None
        ingestor = Ingestor(self.store, job.id, [h.stream for h in self.hosts], extractor, self._wake, echo,
                            budget=budget)
        for reader in self.readers:
            reader.start()
        ingestor.start()

        monitor = self._start_monitor(doc, job_dir) if start_failure is None else None
        maintainer = Maintainer(self.store)
        maintainer.start()
        rules = self._start_rules(job) if start_failure is None else None
        exit_codes: dict[str, int] = {}
        if start_failure is None:
            deadline = doc["CreationTime"] + doc["StoppingCondition"]["MaxRuntimeInSeconds"]
            exit_codes = self._watch(deadline, grace_s)
        else:
            self._terminate(grace_s)
        self._end_leftovers()
        self.ended_at = time.time()  # the job's processes are gone: its training time ends here
        if monitor is not None:
            self._stop_monitor(monitor)
        maintainer.stop()
        self._drain(ingestor)
        if rules is not None:
            rules.finish()  # the last pass, over everything stored, before the job's final status
        shutil.rmtree(spool_dir, ignore_errors=True)  # all stored, or counted as lost: nothing to recover
        row = self._conclude(job, exit_codes, start_failure, ingestor)
        if rules is not None:
            rules.job_ended()  # the report, made after this, shows the job as it ended
            self._await_report(rules)
        return row

    def _start_hosts(self, job: JobRow, prepared: list[tuple[contract.HostLayout, dict[str, str]]],
                     spool_dir: Path, mode: Mode, extractor: Extractor, budget: MemoryBudget) -> str | None:
        settings = job.doc["TrainmonConfig"]
        command = settings["Command"]
        script = settings.get("Script")
        for layout, env in prepared:
            stream = self._retrying(lambda host=layout.host: self._add_stream(job.id, host))
            cwd = str(layout.code_dir) if script else settings.get("WorkingDirectory") or str(layout.root)
            spec = launch.HostSpec(layout.host, command, {**os.environ, **env}, cwd)
            try:
                process = self.launcher.start(spec)
            except launch.LaunchError as exc:
                return f"ClientError: {exc}"
            notes = toolkit.notes(layout.code_dir, settings.get("Interpreter", "")) if script else b""
            pipes = []
            for is_stderr, fd in zip((False, True), process.streams(), strict=True):
                path = spool_path(spool_dir, layout.host, is_stderr)
                reader = PipeReader(fd, path, self._wake, path.name, budget=budget,
                                    losses=LossCounter(extractor.definitions, mode),
                                    preamble=b"" if is_stderr else notes)
                self.readers.append(reader)
                pipes.append(Pipe(reader, RecordCutter(mode), is_stderr))
            self.hosts.append(Host(layout.host, layout, process, HostStream(layout.host, stream.id, pipes)))
        return None

    def _add_stream(self, job_id: int, host: str) -> StreamRow:
        creation_ms = now_ms()
        return self.store.add_stream(job_id, host, f"{self.name}/{host}-{creation_ms // 1000}", creation_ms)

    def _retrying(self, write: Any) -> Any:
        """A write the job cannot start without, tried again until the store takes it."""
        backoff = Backoff()
        while True:
            try:
                return write()
            except StoreError as exc:
                print(f"trainmon: {exc.message}; trying again", file=sys.stderr)
                time.sleep(backoff.next_delay())

    def _start_rules(self, job: JobRow) -> RuleWatcher | None:
        """The thread that evaluates the job's rules, if it has rules trainmon evaluates."""
        if not self.hosts or not evaluated_rules(job.doc):
            return None

        def stop(reason: str) -> None:  # on the rules' thread: the watch loop acts on it
            self._rule_stop = reason

        spools = [(host.name, pipe.reader.spool_path) for host in self.hosts for pipe in host.stream.pipes
                  if isinstance(pipe.reader, PipeReader)]

        def last_read() -> dict[str, float]:  # each host's last read of its output: its spool files' times
            found: dict[str, float] = {}
            for host, path in spools:
                try:
                    found[host] = max(found.get(host, 0.0), os.stat(path).st_mtime)
                except OSError:
                    pass
            return found

        watcher = RuleWatcher(self.store, job, on_stop=stop, activity=last_read,
                              active=lambda: self._stop_reason is None and self.ended_at is None,
                              profile=self._profile_tap)
        watcher.start()
        return watcher

    def _await_report(self, rules: RuleWatcher) -> None:
        """ProfilerReport's report, which the rules' thread writes after the verdicts: for at most
        REPORT_TIMEOUT_S, and not past a Ctrl-C (the job itself has ended)."""
        interrupts, deadline = self._interrupts, time.monotonic() + REPORT_TIMEOUT_S
        while rules.is_alive() and time.monotonic() < deadline and self._interrupts == interrupts:
            rules.join(STOP_POLL_S)

    def _start_monitor(self, doc: JobDocument, job_dir: Path) -> SystemMonitor | None:
        if not self.hosts:
            return None
        settings = profiler_settings(doc)
        profiler = ProfileWriter(settings["S3OutputPath"], self.name) if settings else None
        env = {**os.environ, **doc.get("Environment", {})}
        if profiler is not None and any(r.rule in PROFILER_RULES for r in evaluated_rules(doc)):
            self._profile_tap = ProfileTap()
        monitor = SystemMonitor(
            self.store, self.name, self.launcher.process_groups(), job_dir,
            system_interval_s=doc["TrainmonConfig"].get("SystemMetricsIntervalSeconds", 60),
            profile_interval_ms=settings.get("ProfilingIntervalInMilliseconds") if settings else None,
            profiler=profiler, gpu=default_gpu_source(env),
            tap=self._profile_tap.put if self._profile_tap is not None else None,
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
                return self._exit_codes()
            now = time.time()
            if self._interrupts and self._stop_reason is None:
                self._request_stop("Stopped")
            if self._rule_stop is not None and self._stop_reason is None:
                self._request_stop("Stopped", f"Stopping the training job: {self._rule_stop}")
                self._stop_message = f"Training job stopped by a StopTraining action: {self._rule_stop}"
            if now >= deadline and self._stop_reason is None:
                self._request_stop("MaxRuntimeExceeded")
            if now >= next_stop_poll and self._stop_reason is None:
                next_stop_poll = now + STOP_POLL_S
                self._stop_reason = self.state.stop_requested()
            self.state.flush()  # statuses an outage held back
            if self._stop_reason is not None:
                self._terminate(grace_s)
                return self._exit_codes()
            time.sleep(POLL_S)

    def _exit_codes(self) -> dict[str, int]:
        return {h.name: h.process.wait() for h in self.hosts}

    def _request_stop(self, reason: str, message: str | None = None) -> None:
        self._stop_reason = reason
        if reason == "MaxRuntimeExceeded":
            message = "Stopping the training job: MaxRuntimeInSeconds reached"
        self.state.enter("Stopping", message, stop_requested=reason)

    def _terminate(self, grace_s: float) -> None:
        """SIGTERM to every process of the job, SIGKILL to whatever is left after the grace."""
        self.launcher.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.launcher.running():
            if self._interrupts > 1:
                break  # a second Ctrl-C: no more waiting
            time.sleep(POLL_S)
        self._kill_all()

    def _end_leftovers(self) -> None:
        """What the hosts' main processes left running goes too, as when a container exits."""
        if not self.launcher.running():
            return
        self.launcher.signal(signal.SIGTERM)
        deadline = time.monotonic() + ORPHAN_GRACE_S
        while time.monotonic() < deadline and self.launcher.running():
            time.sleep(POLL_S)
        self._kill_all()

    def _kill_all(self) -> None:
        self.launcher.signal(signal.SIGKILL)
        for host in self.hosts:
            host.process.wait()
        deadline = time.monotonic() + 1.0
        while self.launcher.running() and time.monotonic() < deadline:  # the kernel takes a moment
            time.sleep(POLL_S)

    def _drain(self, ingestor: Ingestor) -> None:
        """Read what the pipes still hold, for at most PIPE_DRAIN_S: a pipe kept open by a process
        beyond trainmon's reach is abandoned, not waited for."""
        deadline = time.monotonic() + PIPE_DRAIN_S
        for reader in self.readers:
            reader.join(max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                reader.abandon()
                reader.join()
        ingestor.finish()
        ingestor.close()
        self.loss = Loss()  # everything not stored: the readers' drops and the ingestor's own
        for reader in self.readers:
            self.loss.add(reader.losses.loss)
        self.loss.add(ingestor.loss)

    # -- the end ------------------------------------------------------------------------------

    def _conclude(
        self, job: JobRow, exit_codes: dict[str, int], start_failure: str | None, ingestor: Ingestor
    ) -> JobRow:
        fields: dict[str, Any] = {}
        unstored = self.loss.unstored()
        if unstored is not None:
            fields["UnstoredOutput"] = unstored
        if ingestor.failure is not None and start_failure is None and not self._stop_reason:
            start_failure = f"InternalServerError: trainmon could not store the job's output: {ingestor.failure}"
        if start_failure is not None:
            return self._finish("Failed", FailureReason=start_failure[:FAILURE_REASON_CHARS], **fields)
        if self._stop_reason is not None:
            self._pack(job)
            return self._finish(self._stop_reason, self._stop_message, **fields)
        failed = sorted((h for h in self.hosts if exit_codes.get(h.name, 0) != 0),
                        key=lambda h: h.name != self.first_failure)  # the host that failed first, not one we ended
        if failed:
            return self._finish("Failed", FailureReason=self._failure_reason(failed[0], exit_codes[failed[0].name]),
                                **fields)
        self.state.enter("Uploading")
        try:
            self._pack(job)
        except OSError as exc:
            return self._finish("Failed", FailureReason=f"ClientError: could not pack the model artifacts: {exc}",
                                **fields)
        return self._finish("Completed", **fields)

    def _finish(self, status: str, message: str | None = None, **fields: Any) -> JobRow:
        row = self.state.finish(status, message, ended_at=self.ended_at, **fields)
        if row is None:
            raise StoreError(f"the job ended {status}, but the store could not record it")
        return row

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
        """model/ -> model.tar.gz (and output/data -> output.tar.gz) of the first host: files, or
        objects of the object store for an s3:// output path."""
        if not self.hosts:
            return
        artifacts = job.doc["ModelArtifacts"]["S3ModelArtifacts"]
        first = self.hosts[0].layout
        archives = [(first.model_dir, "model.tar.gz")]
        if first.output_data_dir.is_dir() and any(first.output_data_dir.iterdir()):
            archives.append((first.output_data_dir, "output.tar.gz"))
        if artifacts.startswith("s3://"):
            for source, name in archives:
                _upload(self.store.home, source, f"{artifacts.rsplit('/', 1)[0]}/{name}")
            return
        target = Path(job.doc["TrainmonConfig"].get("ModelArtifactsPath") or artifacts.removeprefix("file://"))
        target.parent.mkdir(parents=True, exist_ok=True)
        for source, name in archives:
            _tar(source, target.with_name(name))

    # -- signals ------------------------------------------------------------------------------

    def _install_signals(self) -> dict[int, Any]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: Any) -> None:
            self._interrupts += 1
            if self._interrupts == 1:
                print("\ntrainmon: stopping the job (SIGTERM to its processes; Ctrl-C again to kill them now)",
                      file=sys.stderr)

        handlers: dict[int, Any] = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        handlers[signal.SIGHUP] = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the terminal went; the job goes on
        return handlers

    @staticmethod
    def _restore_signals(previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _upload(home: Path, source: Path, uri: str) -> None:
    """A directory packed straight into an object of the object store (OSError when it cannot be)."""
    store = objects.ObjectStore(home)
    bucket, key = objects.parse_uri(uri)
    try:
        with store.staging() as staged:
            with tarfile.open(fileobj=cast(IO[bytes], staged), mode="w|gz") as archive:
                for entry in sorted(source.iterdir()):
                    archive.add(entry, arcname=entry.name)
            store.commit(staged, bucket, key)
    except TrainmonError as exc:  # the bucket went, say
        raise OSError(f"{uri}: {exc.message}") from None


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
