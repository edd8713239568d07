"""Jobs whose supervising process died: found by every command that reads jobs, and ended.

The supervisor records its identity in the job: process id, the process's start time (against
reused ids), host name, and the hosts' process groups. A job of this machine whose supervisor is
gone gets its processes killed and is marked Failed with a reason that says so; what was stored
until then is kept. No daemon is needed.
"""

from __future__ import annotations

import os
import socket

import psutil

from ..errors import StoreError
from ..jobs.document import SupervisorIdentity
from ..jobs.status import ACTIVE
from ..store import Store
from .jobstate import set_status


def identity(pid: int | None = None) -> SupervisorIdentity:
    """The identity of process ``pid`` (default: this one), to record as a job's supervisor."""
    process = psutil.Process(pid)
    return {"pid": process.pid, "create_time": process.create_time(), "hostname": socket.gethostname(), "pgids": []}


def _alive(pid: int, create_time: float) -> bool:
    try:
        process = psutil.Process(pid)
        return abs(process.create_time() - create_time) < 1.0 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def reap_orphans(store: Store) -> list[str]:
    """Mark Failed every active job on this machine whose supervising process is gone."""
    reaped: list[str] = []
    hostname = socket.gethostname()
    try:
        active = store.list_jobs(statuses=ACTIVE)
    except StoreError:
        return reaped
    for job in active:
        supervisor = job.supervisor
        if not supervisor or supervisor.get("hostname") != hostname:
            continue
        if _alive(supervisor["pid"], supervisor["create_time"]):
            continue
        for pgid in supervisor.get("pgids", []):
            try:
                os.killpg(pgid, 9)
            except OSError:
                pass
        reason = (
            f"trainmon's supervising process (pid {supervisor['pid']}) ended without finishing the job: it was "
            "killed or crashed. Logs and metrics captured until then are kept; the job's processes were ended."
        )
        try:
            set_status(store, job.name, "Failed", FailureReason=reason)
        except StoreError:  # a full disk: reading must still work; the next command tries again
            continue
        reaped.append(job.name)
    return reaped
