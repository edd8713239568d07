"""Every process of a job carries ``TRAINMON_PROCESS_TAG`` in its environment, a random value per job
(per host of a Ray job): when the supervisor itself died, :func:`tagged_processes` finds what is
left of the job by that value alone, and :func:`kill_tagged` ends it. A process is held for a
signal as a pidfd (:class:`Opened`) and checked again (its start time) before one goes to it, so
a process id reused by an unrelated process is never signalled. The job's spooler process carries
``TRAINMON_SPOOLER_OF`` instead of the tag, so that whoever reaps the job can wait for it to spool
the last of the output (:func:`wait_for_spooler`).
"""

from __future__ import annotations

import os
import secrets
import signal
import time

from .procfs import PROC, process_table, read_process_stat

TAG_VARIABLE = "TRAINMON_PROCESS_TAG"


SPOOLER_VARIABLE = "TRAINMON_SPOOLER_OF"  # the spooler process of the job with this tag carries it (not the tag)


class Opened:
    """A process held for signalling: a pidfd where the system has them, else the bare id."""

    def __init__(self, pid: int, start_ticks: int) -> None:
        self.pid = pid
        self.fd = -1
        if hasattr(os, "pidfd_open"):
            try:
                self.fd = os.pidfd_open(pid)
            except OSError:
                self.fd = -2  # gone already
        # The descriptor names whatever process had the id when it was opened; the start time
        # read after opening proves it is the one that was listed.
        now = read_process_stat(pid)
        self.valid = self.fd != -2 and now is not None and now.start_ticks == start_ticks

    def send(self, sig: int) -> None:
        if not self.valid:
            return
        try:
            if self.fd >= 0:
                signal.pidfd_send_signal(self.fd, sig)
            else:
                os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


_helpers: set[int] = set()  # processes trainmon started for itself (the spooler): never the job's


def add_helper(pid: int) -> None:
    """A child process of trainmon's own, which the launcher must not take for the job's."""
    _helpers.add(pid)


def remove_helper(pid: int) -> None:
    _helpers.discard(pid)


def new_tag() -> str:
    return secrets.token_hex(16)


def tagged_processes(tag: str, variable: str = TAG_VARIABLE) -> list[tuple[int, int]]:
    """(pid, start time) of every process of this user whose environment carries the job's tag (but
    this one: a command the job ran may be the one reaping it)."""
    marker = f"{variable}={tag}".encode()
    found = []
    me = os.getpid()
    for pid, stat in process_table().items():
        if pid != me and stat.state != "Z" and _carries(pid, marker):
            found.append((pid, stat.start_ticks))
    return found


def _carries(pid: int, marker: bytes) -> bool:
    try:
        environment = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False  # another user's process, or gone
    return marker in environment.split(b"\0")


def wait_for_spooler(tag: str, timeout_s: float = 5.0) -> bool:
    """Wait (at most ``timeout_s``) for the spooler process of the job with ``tag`` to end, as it
    does once every pipe it reads has ended: what it spools is all there afterwards. Whether it did."""
    deadline = time.monotonic() + timeout_s
    while tagged_processes(tag, SPOOLER_VARIABLE):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def kill_tagged(tag: str) -> int:
    """SIGKILL every process that carries the tag, each proven to (opened, then its environment read
    again); the number killed."""
    marker = f"{TAG_VARIABLE}={tag}".encode()
    killed = 0
    for pid, start_ticks in tagged_processes(tag):
        held = Opened(pid, start_ticks)
        if held.valid and _carries(pid, marker):
            held.send(signal.SIGKILL)
            killed += 1
        held.close()
    return killed
