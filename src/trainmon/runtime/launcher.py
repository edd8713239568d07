"""How a job's hosts are started, watched and signalled: the seam between the supervisor and the
machines its hosts run on.

A :class:`Launcher` starts each host (its command, environment and directory) and hands back a
:class:`Host`: its output streams, its exit status, and nothing else. Signals go to the job as a
whole (every process of every host), because that is what a stop, a failure or the end of a job
needs. :class:`LocalLauncher`, processes on this machine, is the one implementation today; a
launcher that places hosts on other machines plugs in beside it.

Locally, trainmon signals only processes it can prove are the job's:

- the supervisor is a *child subreaper* (Linux's ``PR_SET_CHILD_SUBREAPER``), so a process the job
  leaves behind (a double fork, a ``setsid`` daemon) is re-parented to the supervisor, not to
  init: every process the job started stays in the supervisor's process tree until it exits;
- each host's main process is held by a pidfd from the moment it starts, and every other
  process is opened as a pidfd and checked again (its start time, its place in the tree) before a
  signal goes to it, so a process id reused by an unrelated process is never signalled;
- every process of the job inherits ``TRAINMON_PROCESS_TAG``, a random value per job (per host
  of a Ray job): when the supervisor itself died, :func:`tagged_processes` finds what is left of
  the job by that value alone (see :mod:`trainmon.runtime.orphans`, and for a Ray job's hosts
  :mod:`trainmon.runtime.lifeline`).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, Protocol

from . import notify
from .procfs import PROC, children_of, descendants, process_table, read_process_stat

TAG_VARIABLE = "TRAINMON_PROCESS_TAG"
SPOOLER_VARIABLE = "TRAINMON_SPOOLER_OF"  # the spooler process of the job with this tag carries it (not the tag)
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1


class LaunchError(Exception):
    """A host could not be started; the message says why and what to check."""


@dataclass(frozen=True)
class HostSpec:
    name: str
    command: list[str]
    env: dict[str, str]
    cwd: str


class Host(Protocol):
    name: str

    def streams(self) -> tuple[int, int]:
        """Descriptors of the host's stdout and stderr, read ends; the caller owns and closes them."""
        ...

    def poll(self) -> int | None:
        """The exit status of the host's main process (negative: killed by that signal), or None."""
        ...

    def wait(self) -> int:
        """Wait for the host's main process to end; its exit status."""
        ...


class Launcher(Protocol):
    tag: str  # every process of the job carries it (TAG_VARIABLE): what is left of a job is found by it

    def start(self, spec: HostSpec) -> Host:
        """Start one host; LaunchError when its command cannot be started."""
        ...

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every process of the job, on every host."""
        ...

    def running(self) -> bool:
        """Whether any process of the job is left (the hosts' main processes or any they started)."""
        ...

    def process_groups(self) -> dict[str, int]:
        """Each host's process group on this machine, for the system monitor (none for hosts elsewhere)."""
        ...

    def close(self) -> None: ...


# -- processes on this machine -------------------------------------------------------------


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants (Linux); False where the system has none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


class _Opened:
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


class LocalHost:
    """A host's main process on this machine, in a process group of its own (:func:`own_session`)."""

    def __init__(self, name: str, process: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.process = process
        self.process_group = process.pid  # its group, for the system monitor
        self._streams: tuple[int, int] | None = None
        stat = read_process_stat(process.pid)  # the child is not reaped until it is waited for: this is it
        self._held = _Opened(process.pid, stat.start_ticks if stat is not None else -1)

    def streams(self) -> tuple[int, int]:
        if self._streams is None:
            fds = []
            for source in (self.process.stdout, self.process.stderr):
                assert source is not None
                fds.append(os.dup(source.fileno()))
                source.close()
                _widen_pipe(fds[-1])
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


def own_session() -> bool:
    """Whether a host's processes get a session of their own. A detached supervisor (CreateTrainingJob,
    the SDK, the server) or a foreground one (:func:`supervise_in_a_session_of_its_own`) leads a
    session with no terminal: the job joins it, in a process group of its own, since Linux
    schedules a session as one group (autogroup) and only within it does the lower priority of
    the threads that store the job's output count against the job's. Any other session is not the
    supervisor's to share (a shell's, a Ray worker's), and one with a terminal must not give it to
    the job (a read of it would stop the job)."""
    if os.getsid(0) != os.getpid():
        return True
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    except OSError:  # no controlling terminal
        return False
    return True


def supervise_in_a_session_of_its_own(supervise: Callable[[], int]) -> int:
    """Run ``supervise`` (a foreground ``trainmon run``) in a forked process that leads a new
    session, which the job then joins (:func:`own_session`), so that the job and the threads storing
    its output share one scheduling group: a supervisor left in a shell's session weighs as much as
    the job's whole session, however low its threads' priority, and a flood of output could take
    half of a busy machine from the job. Answers ``supervise``'s status; the forked process never
    returns (it exits with that status, after the interpreter's exit handlers).

    This process stays where it was started, in the terminal's foreground, and stands for the
    supervisor there: it passes Ctrl-C and SIGTERM on, ignores SIGHUP (as the supervisor does),
    stops the supervisor with itself on Ctrl-Z and resumes it with itself, and dies of the signal
    that killed the supervisor, if one did. Killed, it takes the supervisor with it
    (``PR_SET_PDEATHSIG``), as when both were one process. Where the job would join this session
    anyway, or where Python threads run (a fork copies none of them), ``supervise`` runs here."""
    if not own_session() or threading.active_count() > 1:
        return supervise()
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    passed_on = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGTSTP}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, passed_on)  # until each side has its handlers
    with warnings.catch_warnings():  # Python 3.12 warns of any thread; NumPy's OpenBLAS pool prepares for a fork
        warnings.simplefilter("ignore", DeprecationWarning)
        child = os.fork()
    if child == 0:
        _supervise_apart(supervise, parent, blocked)
    try:
        return _stand_for(child)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


_early: list[int] = []  # SIGINT and SIGTERM that reached a forked supervisor before it had handlers of its own


def _noted_early(signum: int, _frame: object) -> None:
    _early.append(signum)


def early_signals() -> list[int]:
    """The SIGINT and SIGTERM that reached this (forked) supervisor before its own handlers were in
    place, taken: they count as if they came after."""
    taken = _early[:]
    _early.clear()
    return taken


def _supervise_apart(supervise: Callable[[], int], parent: int, blocked: set[int | signal.Signals]) -> NoReturn:
    code = 1
    try:
        os.setsid()
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        # until the supervisor's own handlers: a Ctrl-C or SIGTERM is kept for it, a SIGHUP ignored as it will be
        signal.signal(signal.SIGINT, _noted_early)
        signal.signal(signal.SIGTERM, _noted_early)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        if os.getppid() == parent:  # else it died before the line above could tie this process to it
            code = supervise()
    except BaseException:  # whatever it was, this process must not go back into its caller
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # what the supervisor's store still holds, written
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _stand_for(child: int) -> int:
    """The supervisor's status, waited for while passing signals on to it."""
    def forward(signum: int, _frame: object) -> None:
        _signal(child, signum)

    def suspend(_signum: int, _frame: object) -> None:
        _signal(child, signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until the shell's fg or bg
        signal.signal(signal.SIGTSTP, suspend)
        _signal(child, signal.SIGCONT)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, forward),
                signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
                signal.SIGHUP: signal.signal(signal.SIGHUP, signal.SIG_IGN),
                signal.SIGTSTP: signal.signal(signal.SIGTSTP, suspend)}
    signal.pthread_sigmask(signal.SIG_UNBLOCK, previous)
    try:
        _, status = os.waitpid(child, 0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed: so is this process, for whoever waits for it (a shell says "Killed")
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {-code})
        os.kill(os.getpid(), -code)
        return 128 - code  # (a signal whose default is not to end a process)
    return code


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


class LocalLauncher:
    """Hosts as process trees on this machine, every process of them provably the job's."""

    def __init__(self, tag: str | None = None) -> None:
        self.tag = tag or new_tag()
        self.hosts: list[LocalHost] = []
        self.me = os.getpid()
        self.own_session = own_session()
        become_subreaper()

    def start(self, spec: HostSpec) -> LocalHost:
        try:
            process = subprocess.Popen(
                spec.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**spec.env, TAG_VARIABLE: self.tag},
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
            held = _Opened(pid, start_ticks)
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


_helpers: set[int] = set()  # processes trainmon started for itself (the spooler): never the job's


def add_helper(pid: int) -> None:
    """A child process of trainmon's own, which the launcher must not take for the job's."""
    _helpers.add(pid)


def remove_helper(pid: int) -> None:
    _helpers.discard(pid)


def _widen_pipe(fd: int) -> None:
    """A 1 MiB pipe buffer (Linux) lets the job keep writing through a brief pause of the reader."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def new_tag() -> str:
    return secrets.token_hex(16)


# -- what is left of a job whose supervisor died ---------------------------------------------


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
        held = _Opened(pid, start_ticks)
        if held.valid and _carries(pid, marker):
            held.send(signal.SIGKILL)
            killed += 1
        held.close()
    return killed
