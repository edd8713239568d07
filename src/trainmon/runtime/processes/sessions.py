"""The session a foreground supervisor runs in: one of its own, which the job joins, so that the job
and the threads storing its output share one scheduling group (a supervisor left in a shell's
session would weigh as much as the job's whole session, and a flood of output could take half of a
busy machine from the job). The ``trainmon run`` left in the terminal stands for the supervisor
there, passing signals on and dying with it; signals that came before the supervisor could handle
them are kept for it (:func:`early_signals`).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

_PR_SET_PDEATHSIG = 1


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
    _early.clear()  # kept for the supervisor, which has its own copy
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


def hold_stop_signals() -> dict[int, Any]:
    """From now until a supervisor's own handlers are in place, a SIGINT or SIGTERM is kept for it
    (:func:`early_signals`) instead of acting at once: ``trainmon run``'s first moments, where
    Python's KeyboardInterrupt could be raised inside code that swallows it (a finalizer, a lookup
    that calls Python and clears its errors) and the job would start as if no one had asked it to
    stop. The handlers it replaced, to put back (none when they are held already: whoever held them
    first puts them back). A stop signal blocked by whoever started this process (a mask is
    inherited) is unblocked: one sent already is kept now, and the job can be stopped."""
    stops = (signal.SIGINT, signal.SIGTERM)
    if all(signal.getsignal(sig) is _noted_early for sig in stops):
        return {}
    replaced: dict[int, Any] = {sig: signal.signal(sig, _noted_early) for sig in stops}
    signal.pthread_sigmask(signal.SIG_UNBLOCK, replaced)
    return replaced


def release_stop_signals() -> None:
    """Python's own handling of SIGINT and SIGTERM again, for a command that supervises nothing
    (``--detach``, a job handed over); a signal kept meanwhile acts now."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for signum in early_signals():
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        os.kill(os.getpid(), signum)


def _supervise_apart(supervise: Callable[[], int], parent: int, blocked: set[int | signal.Signals]) -> NoReturn:
    code = 1
    try:
        os.setsid()
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        # until the supervisor's own handlers: a Ctrl-C or SIGTERM is kept for it (with those kept before the
        # fork), a SIGHUP ignored as it will be
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
