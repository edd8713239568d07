"""A Ray job's submission, and its supervisor in the cluster.

CreateTrainingJob starts ``python -m trainmon.runtime.rayjob NAME`` (as it starts a local
supervisor), which connects to the cluster, creates the job's *coordinator*, a detached Ray actor
on the head node that runs the job's :class:`~trainmon.runtime.supervisor.Supervisor` (whose hosts
are :class:`~trainmon.runtime.cluster.RayHosts`), waits until it has claimed the job, and exits.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import traceback
from pathlib import Path

from ..store import JobRow, Store, open_store
from . import orphans
from .cluster import NAMESPACE, brief, connect
from .hosts import FAILURE_REASON_CHARS
from .jobstate import set_status

HEAD_NODE_RESOURCE = "node:__internal_head__"
CLAIM_TIMEOUT_S = 120.0  # from creating the coordinator to its claiming the job


class JobCoordinator:
    """A Ray actor that runs one job's supervisor in the cluster (detached: it outlives whoever
    submitted the job), then ends itself."""

    def __init__(self, database_url: str, name: str) -> None:
        self._thread = threading.Thread(target=self._run, args=(database_url, name), name=f"trainmon-job-{name}",
                                        daemon=True)
        self._thread.start()

    @staticmethod
    def _run(database_url: str, name: str) -> None:
        import ray

        from .supervisor import Supervisor

        store: Store | None = None
        try:
            store = open_store(database_url=database_url)
            Supervisor(store, name, echo=False, handle_signals=False).run()
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
            sys.stdout.flush()
            sys.stderr.flush()
            ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    def alive(self) -> bool:
        return self._thread.is_alive()


def submit(store: Store, name: str) -> None:
    """Create the job's coordinator in its Ray cluster and wait until it has claimed the job; the
    job Failed, with the reason, when that cannot be done."""
    job = store.get_job(name)
    if job is None:
        raise LookupError(f"no job named {name!r}")
    address = job.doc["TrainmonConfig"]["RayAddress"]
    submitter = orphans.identity()  # the job's supervisor until the coordinator claims it: reaped if this dies

    def adopt(row: JobRow) -> None:
        if row.supervisor is None:
            row.supervisor = submitter

    store.update_job(name, adopt)
    try:
        import ray

        connect(address)
        coordinator = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=2)(JobCoordinator).options(
            name=f"job-{name}-{int(job.doc['CreationTime'] * 1000)}", namespace=NAMESPACE, lifetime="detached",
            resources={HEAD_NODE_RESOURCE: 0.001},  # the head: the node whose loss ends the cluster anyway
        ).remote(store.database_url, name)
        ray.get(coordinator.alive.remote(), timeout=CLAIM_TIMEOUT_S)
    except Exception as exc:  # unreachable, refused, or the coordinator could not be made (trainmon missing there)
        reason = f"InternalServerError: could not start the job on the Ray cluster at {address}: {brief(exc)}"
        set_status(store, name, "Failed", FailureReason=reason[:FAILURE_REASON_CHARS])
        return
    deadline = time.monotonic() + CLAIM_TIMEOUT_S
    while time.monotonic() < deadline:  # this process is the job's supervisor until the coordinator says it is
        row = store.get_job(name)
        if row is None or row.supervisor != submitter or row.status not in ("InProgress", "Stopping"):
            return
        time.sleep(0.1)
    set_status(store, name, "Failed", FailureReason="InternalServerError: the job's coordinator did not start on "
               f"the Ray cluster at {address} within {CLAIM_TIMEOUT_S:.0f} s; see the logs of its Ray workers.")



def main(argv: list[str] | None = None) -> int:
    """The submitting process CreateTrainingJob starts for a Ray job."""
    parser = argparse.ArgumentParser(prog="python -m trainmon.runtime.rayjob")
    parser.add_argument("name")
    parser.add_argument("--home", type=Path)
    args = parser.parse_args(argv)
    submit(open_store(args.home), args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
