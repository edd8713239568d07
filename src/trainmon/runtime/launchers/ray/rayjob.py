"""A Ray job's submission, and the supervisors of the cluster's jobs.

The process CreateTrainingJob starts for a Ray job (``trainmon.cli.supervise``, as for a local one)
calls :func:`submit`, which connects to the cluster, hands the job to the cluster's *coordinator*, and
waits until the job's supervisor has claimed it before it exits. The coordinator is one detached
Ray actor on the head node, shared by every Ray job of that cluster: it runs each job's
:class:`~trainmon.runtime.job.supervisor.Supervisor` (whose hosts are
:class:`~trainmon.runtime.launchers.ray.cluster.RayHosts`) on a thread of its own, so a job costs a thread there,
not a process, and a submission finds the coordinator already started. The first submission
starts it; it ends itself once it has had no job for :data:`IDLE_EXIT_S` (or what
:data:`IDLE_VARIABLE` says on the head), and a submission of another trainmon version starts a
coordinator of its own. Its supervisors take the job over from the submission only while that is
still the job's supervisor, so a submission that gave up (the job Failed) starts nothing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback

from .... import __version__
from ....jobs.document import SupervisorIdentity
from ....store import JobRow, Store, open_store
from ...job import orphans
from ...job.hosts import FAILURE_REASON_CHARS
from ...job.jobstate import set_status
from ...watch.profilewatch import ReportWriter
from .cluster import NAMESPACE, brief, connect

HEAD_NODE_RESOURCE = "node:__internal_head__"
COORDINATOR_NAME = f"trainmon-coordinator-{__version__}"
CLAIM_TIMEOUT_S = 120.0  # from the submission to the job's supervisor claiming it
HAND_OVER_TRIES = 3  # how often another failure of Ray's is tried again before the job fails with it
IDLE_EXIT_S = 300.0  # a coordinator without a job for this long ends itself
IDLE_VARIABLE = "TRAINMON_COORDINATOR_IDLE_SECONDS"  # the head's own setting of it
IDLE_CHECK_S = 1.0


class JobCoordinator:
    """A Ray actor (detached: it outlives whoever submitted) that runs the supervisors of the
    cluster's Ray jobs, one thread each, and ends itself once idle for :data:`IDLE_EXIT_S`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, threading.Thread] = {}
        self._closing = False
        self._idle_since = time.monotonic()
        self._idle_exit_s = float(os.environ.get(IDLE_VARIABLE) or IDLE_EXIT_S)
        threading.Thread(target=self._end_when_idle, name="trainmon-coordinator-idle", daemon=True).start()

    def supervise(self, database_url: str | None, name: str, submitter: SupervisorIdentity,
                  report: ReportWriter | None = None) -> bool:
        """Start the supervisor of job ``name``, which takes the job over from ``submitter`` if that
        is still its supervisor (a submission that gave up, or a second call, starts nothing); False
        when this coordinator is ending, so that the submission starts another. ``report`` writes
        ProfilerReport's report (the submission's, passed by reference: trainmon is on every node)."""
        with self._lock:
            if self._closing:
                return False
            if name not in self._jobs:
                thread = threading.Thread(target=self._run, args=(database_url, name, submitter, report),
                                          name=f"trainmon-job-{name}", daemon=True)
                self._jobs[name] = thread
                thread.start()
            return True

    def _run(self, database_url: str | None, name: str, submitter: SupervisorIdentity,
             report: ReportWriter | None) -> None:
        from ...job.supervisor import Supervisor
        from . import KIND

        store: Store | None = None
        try:
            store = open_store(database_url=database_url)
            Supervisor(store, name, hosts=KIND.hosts, report=report, echo=False,
                       handle_signals=False).run(taking_over=submitter)
        except BaseException as exc:
            traceback.print_exc()
            # the reaper looks only on this machine: say it here (a job that has ended keeps its end)
            reason = f"InternalServerError: the job's supervisor in the Ray cluster failed: {brief(exc)}"
            try:
                if store is not None:
                    set_status(store, name, "Failed", FailureReason=reason[:FAILURE_REASON_CHARS])
            except Exception:
                traceback.print_exc()
        finally:
            if store is not None:
                store.close()
            sys.stdout.flush()
            sys.stderr.flush()
            with self._lock:
                del self._jobs[name]
                if not self._jobs:
                    self._idle_since = time.monotonic()

    def _end_when_idle(self) -> None:
        import ray

        while True:
            time.sleep(IDLE_CHECK_S)
            with self._lock:
                if self._jobs or time.monotonic() - self._idle_since < self._idle_exit_s:
                    continue
                self._closing = True
            try:
                ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
            finally:
                os._exit(0)  # whatever Ray did: a coordinator that is closing takes no job, so it must go


def coordinator() -> object:
    """The cluster's coordinator (this process is connected), started when there is none."""
    import ray

    return ray.remote(num_cpus=0, max_restarts=0, max_concurrency=16)(JobCoordinator).options(
        name=COORDINATOR_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        resources={HEAD_NODE_RESOURCE: 0.001},  # the head: the node whose loss ends the cluster anyway
    ).remote()


def _hand_over(database_url: str | None, name: str, submitter: SupervisorIdentity, deadline: float,
               report: ReportWriter | None) -> None:
    """Give the job to the cluster's coordinator (one that is ending is waited out and replaced)."""
    import ray

    failures = 0
    while True:
        try:
            if ray.get(coordinator().supervise.remote(database_url, name, submitter, report),  # type: ignore[attr-defined]
                       timeout=max(1.0, deadline - time.monotonic())):
                return
        except (ray.exceptions.RayActorError, ValueError):
            pass  # it died between being found and being asked (or its name is still being freed): the next one
        except Exception:
            # Anything else of Ray's is tried again a few times (once, under a loaded test run, Ray
            # failed with "Expected str or bytes, got <class 'NoneType'>" from its own code, reading
            # the coordinator's class back); what lasts (trainmon missing on the head node) fails the job.
            failures += 1
            if failures >= HAND_OVER_TRIES:
                raise
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the cluster's coordinator did not take the job within {CLAIM_TIMEOUT_S:.0f} s")
        time.sleep(0.5)


def submit(store: Store, name: str, report: ReportWriter | None = None) -> None:
    """Hand the job to its Ray cluster's coordinator and wait until its supervisor there has claimed
    it; the job Failed, with the reason, when that cannot be done."""
    job = store.get_job(name)
    if job is None:
        raise LookupError(f"no job named {name!r}")
    address = job.doc["TrainmonConfig"]["RayAddress"]
    submitter = orphans.identity()  # the job's supervisor until the coordinator claims it: reaped if this dies

    def adopt(row: JobRow) -> None:
        if row.supervisor is None:
            row.supervisor = submitter

    store.update_job(name, adopt)
    deadline = time.monotonic() + CLAIM_TIMEOUT_S
    try:
        connect(address)
        _hand_over(store.database_url, name, submitter, deadline, report)
    except Exception as exc:  # unreachable, refused, or the coordinator could not be made (trainmon missing there)
        reason = f"InternalServerError: could not start the job on the Ray cluster at {address}: {brief(exc)}"
        set_status(store, name, "Failed", FailureReason=reason[:FAILURE_REASON_CHARS])
        return
    while time.monotonic() < deadline:  # this process is the job's supervisor until the coordinator's claims it
        row = store.get_job(name)
        if row is None or row.supervisor != submitter or row.status not in ("InProgress", "Stopping"):
            return
        time.sleep(0.1)
    set_status(store, name, "Failed", FailureReason="InternalServerError: the job's supervisor did not start on "
               f"the Ray cluster at {address} within {CLAIM_TIMEOUT_S:.0f} s; see the logs of its Ray workers.")
