"""Hosts as processes of this machine: :class:`LocalLauncher` starts each host's process in a process
group of its own, with its output on pipes, and signals only processes it can prove are the job's:

- the supervisor is a *child subreaper* (Linux's ``PR_SET_CHILD_SUBREAPER``), so a process the job
  leaves behind (a double fork, a ``setsid`` daemon) is re-parented to the supervisor, not to
  init: every process the job started stays in the supervisor's process tree until it exits;
- each host's main process is held by a pidfd from the moment it starts, and every other
  process is opened as a pidfd and checked again (its start time, its place in the tree) before a
  signal goes to it, so a process id reused by an unrelated process is never signalled;
- every process of the job inherits ``TRAINMON_PROCESS_TAG``, a random value per job (per host
  of a Ray job): when the supervisor itself died, :func:`trainmon.runtime.processes.tags.tagged_processes` finds what is left of
  the job by that value alone (see :mod:`trainmon.runtime.job.orphans`, and for a Ray job's hosts
  :mod:`trainmon.runtime.launchers.ray.lifeline`).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys

from ...capture.pipes import widen_pipe
from ...processes import optml
from ...processes.procfs import children_of, descendants, process_table, read_process_stat
from ...processes.sessions import own_session
from ...processes.tags import TAG_VARIABLE, Opened, _helpers, new_tag
from ...watch import notify
from ..launcher import HostSpec, LaunchError

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants (Linux); False where the system has none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


class LocalHost:
    """A host's main process on this machine, in a process group of its own (:func:`own_session`)."""

    def __init__(self, name: str, process: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.process = process
        self.process_group = process.pid  # its group, for the system monitor
        self._streams: tuple[int, int] | None = None
        stat = read_process_stat(process.pid)  # the child is not reaped until it is waited for: this is it
        self._held = Opened(process.pid, stat.start_ticks if stat is not None else -1)

    def streams(self) -> tuple[int, int]:
        if self._streams is None:
            fds = []
            for source in (self.process.stdout, self.process.stderr):
                assert source is not None
                fds.append(os.dup(source.fileno()))
                source.close()
                widen_pipe(fds[-1])
            self._streams = (fds[0], fds[1])
        return self._streams

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self) -> int:
        return self.process.wait()

    def send(self, sig: int) -> None:
        if self.process.returncode is None:
            self._held.send(sig)

    def close(self) -> None:
        self._held.close()


class LocalLauncher:
    """Hosts as process trees on this machine, every process of them provably the job's."""

    def __init__(self, tag: str | None = None) -> None:
        self.tag = tag or new_tag()
        self.hosts: list[LocalHost] = []
        self.me = os.getpid()
        self.own_session = own_session()
        become_subreaper()

    def start(self, spec: HostSpec) -> LocalHost:
        env = {**os.environ, **spec.env, TAG_VARIABLE: self.tag}
        command = spec.command
        try:
            if spec.opt_ml is not None and sys.platform == "linux":
                _check_executable(command, env.get("PATH", os.defpath), spec.cwd)
                command = [sys.executable, "-I", "-S", optml.__file__, spec.opt_ml, "--", *command]
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=spec.cwd,
                start_new_session=self.own_session,
                process_group=None if self.own_session else 0,
            )
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise LaunchError(f"cannot start {spec.command[0]!r} on {spec.name}: {reason}. Check the command and "
                              "that it is on PATH or given with its path.") from None
        host = LocalHost(spec.name, process)
        self.hosts.append(host)
        return host

    def signal(self, sig: int) -> None:
        for host in self.hosts:
            host.send(sig)
        for pid, start_ticks in self._others():
            held = Opened(pid, start_ticks)
            held.send(sig)
            held.close()

    def running(self) -> bool:
        return any(host.poll() is None for host in self.hosts) or bool(self._others())

    def process_groups(self) -> dict[str, int]:
        return {host.name: host.process_group for host in self.hosts}

    def close(self) -> None:
        for host in self.hosts:
            host.close()

    def _others(self) -> list[tuple[int, int]]:
        """Every living process of the job but the hosts' main ones: their descendants, and the
        processes they left behind (re-parented to this one, the subreaper). Adopted ones that
        have exited are reaped here (the hosts' own are Popen's to reap)."""
        table = process_table()
        mains = {host.process.pid for host in self.hosts}
        children = children_of(table)
        own = notify.commands_running() | frozenset(_helpers)  # this process's own children: not the job's
        adopted = [pid for pid in children.get(self.me, []) if pid not in mains and pid not in own]
        found: list[tuple[int, int]] = []
        for pid in descendants([*mains, *adopted], children):
            if pid in mains:
                continue
            stat = table[pid]
            if stat.state == "Z":
                if stat.ppid == self.me:
                    _reap(pid)
                continue
            found.append((pid, stat.start_ticks))
        return found


def _check_executable(command: list[str], search: str, cwd: str) -> None:
    """OSError, as starting it would raise, when the command cannot be run: said before the host
    starts, not by the program that enters its namespace (:mod:`~trainmon.runtime.processes.optml`)."""
    if not command or not command[0]:
        raise ValueError("the command is empty")
    program = command[0]
    if "/" in program:
        path = os.path.join(cwd, program)
        if not os.path.exists(path):
            raise FileNotFoundError(2, os.strerror(2))
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(13, os.strerror(13))
    elif shutil.which(program, path=search) is None:
        raise FileNotFoundError(2, os.strerror(2))
    if not os.path.isdir(cwd):
        raise FileNotFoundError(2, f"{os.strerror(2)}: {cwd!r}")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
