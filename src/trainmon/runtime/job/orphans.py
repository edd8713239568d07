"""Jobs whose supervising process died: found by every command that reads jobs (one that reads a
job named looks at that job alone, :func:`reaped`; one that lists jobs, at every job of this
machine, :func:`reap_orphans`), and ended properly.

The supervisor records its identity in the job: process id, the process's start time (against
reused ids), host name, and the job's process tag (:mod:`trainmon.runtime.processes.tags`). A job of
this machine whose supervisor is gone is reaped by the first command that notices, in order:

1. the reaper takes the job over (its identity replaces the dead one's, atomically), so that two
   commands never reap one job twice, and a reaper that dies in turn is reaped like a supervisor;
2. what is left of the job's processes is killed: only processes whose environment carries the
   job's tag, each checked again after it is opened (never a bare process id), and the containers
   of a job run in an image, found by the label that holds the tag (never by name alone);
3. the output left in the job's spool is stored (:mod:`trainmon.runtime.capture.recovery`);
4. the job ends as its supervisor recorded beside the spool when it left a store that was gone
   (:func:`~trainmon.runtime.job.jobstate.replay`: Completed, say, at the time it ended); else it is
   marked Failed, with a reason that says so, and its training time ends when its processes did
   (at the last output, or now if some were still running), not when it was noticed.

Logs and metrics stored until then are kept. No daemon is needed.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import threading
import time
from typing import Any

import psutil

from ...errors import StoreError
from ...jobs.document import SupervisorIdentity
from ...jobs.status import ACTIVE
from ...store import JobRow, Store
from .jobstate import replay, set_status


def identity(pid: int | None = None, *, tag: str = "") -> SupervisorIdentity:
    """The identity of process ``pid`` (default: this one), to record as a job's supervisor."""
    process = psutil.Process(pid)
    return {"pid": process.pid, "create_time": process.create_time(), "hostname": socket.gethostname(),
            "tag": tag}


def alive(supervisor: SupervisorIdentity) -> bool:
    try:
        process = psutil.Process(supervisor["pid"])
        return (abs(process.create_time() - supervisor["create_time"]) < 1.0
                and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


class _Watched:
    """Supervisors found alive, each held as a pidfd (Linux): whether one is still alive is then a
    poll of it, not the reads of ``/proc`` that :func:`alive` makes, so a server that reaps at every
    request pays next to nothing for its running jobs. A pidfd is opened only after :func:`alive`
    proved the identity, and proved again after it was opened (so the pid was not reused meanwhile);
    it reads as ended once the process has exited (a zombie included, as :func:`alive` judges)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fds: dict[tuple[int, float], int] = {}
        self._owner = os.getpid()

    def alive(self, supervisor: SupervisorIdentity) -> bool:
        key = (supervisor["pid"], supervisor["create_time"])
        with self._lock:
            self._after_fork()
            fd = self._fds.get(key)
            if fd is not None:
                if not _exited(fd):
                    return True
                del self._fds[key]
                os.close(fd)
                return False
        if not alive(supervisor):
            return False
        try:
            fd = os.pidfd_open(supervisor["pid"])
        except (AttributeError, OSError):  # (no pidfds here: alive() each time)
            return True
        if not alive(supervisor):
            os.close(fd)
            return False
        with self._lock:
            self._after_fork()
            if key in self._fds:
                os.close(fd)
            else:
                self._fds[key] = fd
        return True

    def keep_only(self, supervisors: set[tuple[int, float]]) -> None:
        """The pidfds of supervisors no longer among an active job's closed (their jobs ended)."""
        with self._lock:
            self._after_fork()
            for key in self._fds.keys() - supervisors:
                os.close(self._fds.pop(key))

    def forget(self, supervisor: SupervisorIdentity) -> None:
        """The pidfd of a supervisor whose job has ended closed, if one is held."""
        with self._lock:
            self._after_fork()
            fd = self._fds.pop((supervisor["pid"], supervisor["create_time"]), None)
            if fd is not None:
                os.close(fd)

    def _after_fork(self) -> None:
        if self._owner != os.getpid():  # (a child holds copies of its parent's: its own from now on)
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._owner = os.getpid()


def _exited(pidfd: int) -> bool:
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


_watched = _Watched()


def reap_orphans(store: Store) -> list[str]:
    """Reap every active job on this machine whose supervising process is gone; their names."""
    reaped: list[str] = []
    hostname = socket.gethostname()
    try:
        active = store.supervisors(ACTIVE)
    except StoreError:
        return reaped
    here = [(name, supervisor) for name, supervisor in active if supervisor and supervisor.get("hostname") == hostname]
    for name, supervisor in here:
        if _watched.alive(supervisor):
            continue
        try:
            job = store.get_job(name)
            if job is not None and job.status in ACTIVE and job.supervisor == supervisor and _reap(store, job,
                                                                                                 supervisor):
                reaped.append(job.name)
        except StoreError:  # a full disk, a lost server: reading must still work; the next command tries again
            continue
    _watched.keep_only({(supervisor["pid"], supervisor["create_time"]) for _, supervisor in here})
    return reaped


def reaped(store: Store, job: JobRow) -> JobRow:
    """``job`` as it stands once reaped, if it is an active job of this machine whose supervising
    process is gone: what :func:`reap_orphans` does for every job, for the one a read asks about
    (describing a job, or reading its metrics or logs, then costs the same however many other jobs
    run)."""
    supervisor = job.supervisor
    if not supervisor or supervisor.get("hostname") != socket.gethostname():
        return job
    if job.status not in ACTIVE:
        _watched.forget(supervisor)  # (a server asked only about single jobs holds no pidfd of one ended)
        return job
    if _watched.alive(supervisor):
        return job
    try:
        if _reap(store, job, supervisor):
            return store.get_job(job.name) or job
    except StoreError:  # as reap_orphans: reading must still work, and the next read tries again
        pass
    return job


def _reap(store: Store, job: JobRow, dead: SupervisorIdentity) -> bool:
    from ..capture import recovery
    from ..processes import tags

    me = identity(tag=dead.get("tag", ""))

    def take_over(row: JobRow) -> None:
        if row.supervisor == dead:
            row.supervisor = me

    if store.update_job(job.name, take_over).supervisor != me:
        return False  # another command is reaping it
    tag = dead.get("tag", "")
    in_containers = bool(tag) and "Image" in job.doc["TrainmonConfig"] and _remove_containers(tag) > 0
    still_running = bool(tag) and tags.kill_tagged(tag) > 0 or in_containers
    if tag:
        tags.wait_for_spooler(tag)  # it spools what the pipes still held, then ends
    unstored = recovery.recover(store, job).unstored()
    directory = recovery.spool_dir(store, job.name)
    if still_running or replay(store, job.name, directory / recovery.ENDING, unstored) is None:
        fields: dict[str, Any] = {} if unstored is None else {"UnstoredOutput": unstored}
        last_ms = recovery.last_activity_ms(store, job)
        ended_at = time.time() if still_running or last_ms is None else last_ms / 1000
        fields["FailureReason"] = (
            f"trainmon's supervising process (pid {dead['pid']}) ended without finishing the job: it was killed or "
            "crashed. The output it had captured was stored; the job's processes were ended.")
        set_status(store, job.name, "Failed", ended_at=ended_at, **fields)
    shutil.rmtree(directory, ignore_errors=True)
    return True


def _remove_containers(tag: str) -> int:
    """Remove the containers of the job with this tag (killed if running); how many there were."""
    from ..containers import engine

    try:
        return engine.find().remove_tagged(tag)
    except engine.EngineError:
        return 0  # no engine now: nothing of it can be running
