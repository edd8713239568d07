"""One process owns one job: it starts the hosts, wires capture to the store, and ends the job.

Run in the foreground by ``trainmon run``, or detached (``python -m trainmon.cli.supervise NAME``) by
``create_training_job``. Stop requests arrive through the store (``trainmon stop`` from
any terminal), as SIGINT (Ctrl-C) or SIGTERM; every process of the job gets SIGTERM, then SIGKILL
after the grace period. SIGHUP (a terminal that went away) is ignored: the job goes on, captured,
and the echo to the terminal ends.

Once the job's processes have ended, the supervisor stores what is left of their output and the
job's end for as long as the store takes them, but not forever (:class:`~trainmon.runtime.retry.Patience`):
a store that refuses every write for STORE_WAIT_S, or a Ctrl-C or SIGTERM, and it leaves. The
output not stored stays in the job's spool and the statuses not written beside it
(:meth:`~trainmon.runtime.job.jobstate.JobState.leave`); the first command that reads jobs once the
store is back stores both (:mod:`trainmon.runtime.job.orphans`), so the job ends as it really did.

The hosts, with their capture and system monitors, are :class:`~trainmon.runtime.job.hosts.JobHosts`:
on this machine, or placed on a Ray cluster's nodes (:mod:`trainmon.runtime.launchers.ray.cluster`). When the
main process of every host has exited, whatever they left running is ended (as when a container
exits), and capture ends after a bounded drain, so a process that holds a pipe open cannot hold
the job. Monitoring never ends the job: the store may be unreachable for any length of time
(:class:`~trainmon.runtime.job.jobstate.JobState` and the ingestor write everything when it is
back), and a failing system monitor or profiler is reported, not fatal.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ...errors import StoreError, TrainmonError
from ...jobs.document import SupervisorIdentity
from ...jobs.status import ACTIVE, profiler_settings
from ...rules.catalog import PROFILER_RULES
from ...store import JobRow, Store
from ..capture import recovery
from ..capture.loss import Loss
from ..contract import layout as contract
from ..processes import sessions
from ..retry import STORE_WAIT_S, Patience
from ..watch import notify
from ..watch.maintenance import Maintainer
from ..watch.profilewatch import ProfileTap, ReportWriter
from ..watch.rulewatch import RuleWatcher, evaluated_rules
from . import orphans
from .hosts import FAILURE_REASON_CHARS, HostsContext, HostsFactory, JobHosts
from .jobstate import JobState

POLL_S = 0.05
STOP_POLL_S = 0.25
ORPHAN_GRACE_S = 2.0
REPORT_TIMEOUT_S = 600.0  # the profiling report, after the job's final status: its time, bounded
SAME_INTERRUPT_S = 0.25  # a second SIGINT or SIGTERM sooner than this is the same request, sent to both processes


class JobLeft(StoreError):
    """The job has ended, but the store did not take its output and its end in time: both wait in
    the job's spool for the first command that reads jobs once the store is back."""

    def __init__(self, name: str, status: str, spool: Path, cause: str) -> None:
        super().__init__(
            f"job {name} ended {status}, but {cause}. Its output and its end are kept in {spool}; the first "
            f"trainmon command that reads jobs once the store takes writes (`trainmon describe {name}`, say) "
            "stores them, and nothing is lost.")
        self.status = status
        self.spool = spool


class Supervisor:
    def __init__(
        self,
        store: Store,
        name: str,
        *,
        hosts: HostsFactory,
        report: ReportWriter | None = None,
        echo: bool = True,
        live_metrics: bool = False,
        handle_signals: bool = True,
    ) -> None:
        self.store = store
        self.name = name
        self.echo_enabled = echo
        self.live_metrics = live_metrics
        self.handle_signals = handle_signals
        self.make_hosts = hosts  # the job's launcher's (launchers.registry.job_hosts picks it by the job)
        self.report = report  # ProfilerReport's writer of the profiling report
        self.store_wait_s = STORE_WAIT_S  # the job's own, once it is read
        self.state = JobState(store, name)
        self.loss = Loss()
        self._stop_reason: str | None = None  # "Stopped" | "MaxRuntimeExceeded"
        self._stop_message: str | None = None  # what the final status says, when a rule stopped the job
        self._rule_stop: str | None = None  # set by the rules' thread: a StopTraining action fired
        self._interrupts = 0
        self._interrupts_at_end = 0  # the count when the job's processes had ended
        self._interrupted_at = -SAME_INTERRUPT_S
        self.first_failure: str | None = None
        self.ended_at: float | None = None
        self._profile_tap: ProfileTap | None = None  # the monitor's profile rows, for the profiler rules
        self._patience: Patience | None = None  # how long the end waits for the store, once the job has ended
        self._left = False  # the output not stored waits in the spool: so does the job's end
        self.hosts: JobHosts | None = None

    # -- the whole life of a job ------------------------------------------------------------

    def run(self, *, taking_over: SupervisorIdentity | None = None) -> JobRow:
        """Supervise the job from start to end; with ``taking_over``, only if that is still its
        supervisor (the process that submitted it) and it is still active: else the job as it is."""
        job = self.store.get_job(self.name)
        if job is None:
            raise TrainmonError(f"no job named {self.name!r} to supervise")
        self.store_wait_s = float(job.doc["TrainmonConfig"].get("StoreWaitSeconds", STORE_WAIT_S))
        self.hosts = hosts = self._hosts(job)
        identity = orphans.identity(tag=hosts.tag)

        def claim(row: JobRow) -> None:
            if taking_over is None or (row.supervisor == taking_over and row.status in ACTIVE):
                row.supervisor = identity

        job = self.store.update_job(self.name, claim)
        if job.supervisor != identity:
            return job  # it ended, or another supervisor has it, before this one came
        previous = self._install_signals()
        try:
            return self._run(job, hosts)
        finally:
            self._restore_signals(previous)
            hosts.close()
            notify.flush()  # the rules' notifications still under way get their time (none: at once)

    def _hosts(self, job: JobRow) -> JobHosts:
        names = contract.host_names(job.doc["ResourceConfig"]["InstanceCount"])
        return self.make_hosts(HostsContext(self.store, job, names, self.state, self.echo_enabled, self.live_metrics))

    def _run(self, job: JobRow, hosts: JobHosts) -> JobRow:
        doc = job.doc
        grace_s = float(doc["TrainmonConfig"]["StopGraceSeconds"])

        ended = self._ended_before_start(hosts.place())  # the machines (waiting for room, on a cluster)
        if ended is None:
            self.state.enter("Downloading")
            ended = self._ended_before_start(hosts.prepare())  # the contract on them
        if ended is not None:
            return ended
        if any(r.rule in PROFILER_RULES for r in evaluated_rules(doc)) and profiler_settings(doc):
            self._profile_tap = ProfileTap()
        start_failure = hosts.start(self._profile_tap)
        if self.state.interrupted and self._stop_reason is None:  # while the hosts started (a store away, say)
            start_failure = None
            self._request_stop("Stopped")
        if start_failure is None:
            self.state.enter("Training")
        maintainer = Maintainer(self.store)
        maintainer.start()
        rules = self._start_rules(job, hosts) if start_failure is None else None
        exit_codes: dict[str, int] = {}
        if start_failure is None:
            deadline = doc["CreationTime"] + doc["StoppingCondition"]["MaxRuntimeInSeconds"]
            exit_codes = self._watch(hosts, deadline, grace_s)
        else:
            self._terminate(hosts, grace_s)
        self._end_leftovers(hosts)
        self._patience = self._patience_from_now()
        self.ended_at = time.time()  # the job's processes are gone: its training time ends here
        maintainer.stop()
        end = hosts.finish(self._patience)
        for warning in end.warnings:
            print(f"trainmon: warning: {warning}", file=sys.stderr)
        self.loss = end.loss  # everything not stored: the readers' drops and the ingestor's own
        self._left = end.left
        if rules is not None:
            if end.left:
                rules.abandon()  # no verdict on output the store has not got
                rules = None
            else:
                rules.finish()  # the last pass, over everything stored, before the job's final status
        row = self._conclude(job, hosts, exit_codes, start_failure, end.ingest_failure)
        if rules is not None:
            rules.job_ended()  # the report, made after this, shows the job as it ended
            self._await_report(rules)
        return row

    def _ended_before_start(self, failure: str | None) -> JobRow | None:
        """The job ended Failed (``failure``) or stopped (a stop request came) before any host started;
        None when it goes on."""
        if failure is not None:
            return self._finish("Failed", FailureReason=failure)
        requested = self.state.stop_requested()
        if requested:
            self._stop_reason = requested  # stopped before it started: start nothing
            return self._finish(requested)
        return None

    def _start_rules(self, job: JobRow, hosts: JobHosts) -> RuleWatcher | None:
        """The thread that evaluates the job's rules, if it has rules trainmon evaluates."""
        if not evaluated_rules(job.doc):
            return None

        def stop(reason: str) -> None:  # on the rules' thread: the watch loop acts on it
            self._rule_stop = reason

        watcher = RuleWatcher(self.store, job, on_stop=stop, activity=hosts.last_read,
                              active=lambda: self._stop_reason is None and self.ended_at is None,
                              profile=self._profile_tap, stored_through=hosts.stored_through, report=self.report,
                              tensor_files=hosts.tensor_files())
        watcher.start()
        return watcher

    def _await_report(self, rules: RuleWatcher) -> None:
        """ProfilerReport's report, which the rules' thread writes after the verdicts: for at most
        REPORT_TIMEOUT_S, and not past a Ctrl-C (the job itself has ended)."""
        interrupts, deadline = self._interrupts, time.monotonic() + REPORT_TIMEOUT_S
        while rules.is_alive() and time.monotonic() < deadline and self._interrupts == interrupts:
            rules.join(STOP_POLL_S)

    def _watch(self, hosts: JobHosts, deadline: float, grace_s: float) -> dict[str, int]:
        """Wait for every host; act on failures, stop requests and the runtime limit."""
        next_stop_poll = 0.0
        while True:
            codes = hosts.poll()
            if all(code is not None for code in codes.values()):
                return {name: code for name, code in codes.items() if code is not None}
            failing = [name for name, code in codes.items() if code not in (None, 0)]
            if failing:
                self.first_failure = failing[0]
                self._terminate(hosts, grace_s)  # one host failed: the job fails, the others end
                return hosts.wait()
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
                self._terminate(hosts, grace_s)
                return hosts.wait()
            time.sleep(POLL_S)

    def _request_stop(self, reason: str, message: str | None = None) -> None:
        self._stop_reason = reason
        if reason == "MaxRuntimeExceeded":
            message = "Stopping the training job: MaxRuntimeInSeconds reached"
        self.state.enter("Stopping", message, stop_requested=reason)

    def _terminate(self, hosts: JobHosts, grace_s: float) -> None:
        """SIGTERM to every process of the job, SIGKILL to whatever is left after the grace."""
        hosts.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and hosts.running():
            if self._interrupts > 1:
                break  # a second Ctrl-C: no more waiting
            time.sleep(POLL_S)
        self._kill_all(hosts)

    def _end_leftovers(self, hosts: JobHosts) -> None:
        """What the hosts' main processes left running goes too, as when a container exits."""
        if not hosts.running():
            return
        hosts.signal(signal.SIGTERM)
        deadline = time.monotonic() + ORPHAN_GRACE_S
        while time.monotonic() < deadline and hosts.running():
            time.sleep(POLL_S)
        self._kill_all(hosts)

    @staticmethod
    def _kill_all(hosts: JobHosts) -> None:
        hosts.signal(signal.SIGKILL)
        hosts.wait()
        deadline = time.monotonic() + 1.0
        while hosts.running() and time.monotonic() < deadline:  # the kernel takes a moment
            time.sleep(POLL_S)

    # -- the end ------------------------------------------------------------------------------

    def _conclude(self, job: JobRow, hosts: JobHosts, exit_codes: dict[str, int], start_failure: str | None,
                  ingest_failure: str | None) -> JobRow:
        fields: dict[str, Any] = {}
        unstored = self.loss.unstored()
        if unstored is not None:
            fields["UnstoredOutput"] = unstored
        if ingest_failure is not None and start_failure is None and not self._stop_reason:
            start_failure = f"InternalServerError: trainmon could not store the job's output: {ingest_failure}"
        if start_failure is not None:
            return self._finish("Failed", FailureReason=start_failure[:FAILURE_REASON_CHARS], **fields)
        if self._stop_reason is not None:
            hosts.pack(job.doc)
            return self._finish(self._stop_reason, self._stop_message, **fields)
        failed = sorted((name for name in hosts.names if exit_codes.get(name, 0) != 0),
                        key=lambda name: name != self.first_failure)  # the host that failed first, not one we ended
        if failed:
            return self._finish("Failed", FailureReason=hosts.failure_reason(failed[0], exit_codes[failed[0]]),
                                **fields)
        self.state.enter("Uploading", write=not self._left)
        try:
            hosts.pack(job.doc)
        except OSError as exc:
            return self._finish("Failed", FailureReason=f"ClientError: could not pack the model artifacts: {exc}",
                                **fields)
        return self._finish("Completed", **fields)

    def _patience_from_now(self) -> Patience:
        """How long the end waits for the store from now: STORE_WAIT_S of refusals, or one more Ctrl-C."""
        self._interrupts_at_end = self._interrupts

        def waiting(refusal: StoreError) -> None:
            print(f"trainmon: the job has ended, and the store refuses writes ({refusal.message}). Waiting up to "
                  f"{self.store_wait_s:g} s for it; Ctrl-C stops waiting, and what it has not taken is kept for "
                  "later.", file=sys.stderr, flush=True)

        return Patience(self.store_wait_s, lambda: self._interrupts > self._interrupts_at_end, on_refusal=waiting)

    def _finish(self, status: str, message: str | None = None, **fields: Any) -> JobRow:
        if self._patience is None:  # the job ends before it started
            self._patience = self._patience_from_now()
        if self._left:  # the output waits in the spool: the job's end waits with it, to be stored after it
            self.state.enter(status, message, ended_at=self.ended_at, write=False, **fields)
        else:
            row = self.state.finish(status, message, ended_at=self.ended_at, patience=self._patience, **fields)
            if row is not None:
                return row
            if self._patience is None or self._patience.lost_by is None:  # a disk that stayed full
                raise StoreError(f"the job ended {status}, but the store could not record it")
        spool = recovery.spool_dir(self.store, self.name)
        try:
            self.state.leave(spool / recovery.ENDING)
        except OSError as exc:
            raise StoreError(f"the job ended {status}, but neither the store nor its spool ({spool}) could record it: "
                             f"{exc.strerror or exc}") from None
        patience = self._patience
        if patience is not None and patience.lost_by == "store" and patience.refusal is not None:
            cause = f"the store refused every write for {self.store_wait_s:g} s ({patience.refusal.message})"
        else:
            cause = "trainmon was asked to stop waiting for the store"
        raise JobLeft(self.name, status, spool, cause)

    # -- signals ------------------------------------------------------------------------------

    def _install_signals(self) -> dict[int, Any]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: Any) -> None:
            now = time.monotonic()
            if now - self._interrupted_at < SAME_INTERRUPT_S:  # `pkill -f`: to the terminal's process too, which
                return  # passes it on (launcher.supervise_in_a_session_of_its_own): one request, not "again"
            self._interrupted_at = now
            self._interrupts += 1
            self.state.interrupted = True
            if self.ended_at is not None:  # the job's processes are gone: what is left is its bookkeeping
                if self._interrupts == self._interrupts_at_end + 1:
                    print("\ntrainmon: the job has ended; trainmon stops waiting (what the store has not taken yet "
                          "is kept for later)", file=sys.stderr)
            elif self._interrupts == 1:
                print("\ntrainmon: stopping the job (SIGTERM to its processes; Ctrl-C again to kill them now)",
                      file=sys.stderr)

        handlers: dict[int, Any] = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        handlers[signal.SIGHUP] = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the terminal went; the job goes on
        for signum in sessions.early_signals():  # come before these handlers (trainmon run's forked supervisor)
            on_signal(signum, None)
        return handlers

    @staticmethod
    def _restore_signals(previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
