"""Time as the system monitor sees it: monotonic seconds, wall seconds, and waiting for a deadline or a stop.

Code that schedules on time takes a :class:`Clock` instead of calling :mod:`time` itself.
:data:`REAL_CLOCK` (a :class:`RealClock`) is the default everywhere; a :class:`ManualClock` is
for tests: its time moves only when the test moves it, so a test of ticks, intervals and rates
checks exact figures and never sleeps or depends on how fast the machine is.

A thread waits between its deadlines on a :class:`StopSignal` that the clock makes: the wait
ends at the deadline (by the clock's monotonic time) or as soon as another thread sets the
signal, whichever comes first.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

_POLL_S = 0.01  # how often ManualClock looks whether a thread it waits for has ended


class StopSignal(Protocol):
    def set(self) -> None:
        """Asks the waiting thread to stop: its wait ends now, and every later wait at once."""

    def wait_until(self, deadline_s: float) -> bool:
        """Waits until the clock's monotonic time reaches ``deadline_s``, or the signal is set: True if set."""


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds that only move forward, from an arbitrary origin: for intervals and deadlines."""

    def wall(self) -> float:
        """Seconds since the epoch: for timestamps."""

    def stop_signal(self) -> StopSignal:
        """A new signal, not set, to wait on between deadlines of this clock."""

    def start(self, thread: threading.Thread) -> None:
        """Starts a thread that waits on this clock's signals (a ManualClock returns once it waits)."""


class RealClock:
    """The system's clocks (:func:`time.monotonic`, :func:`time.time`)."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def stop_signal(self) -> StopSignal:
        return _LockSignal()

    def start(self, thread: threading.Thread) -> None:
        thread.start()


REAL_CLOCK = RealClock()


class _LockSignal:
    """A lock held until the signal is set: a timed acquire is the cheapest timed wait there is."""

    def __init__(self) -> None:
        self._released = threading.Lock()
        self._released.acquire()
        self._setting = threading.Lock()
        self._is_set = False

    def set(self) -> None:
        with self._setting:
            if not self._is_set:
                self._is_set = True
                self._released.release()

    def wait_until(self, deadline_s: float) -> bool:
        if self._is_set:
            return True
        return self._released.acquire(True, max(0.0, deadline_s - time.monotonic()))


class ManualClock:
    """A clock for tests: it stands still until :meth:`advance` or :meth:`jump` moves it.

    Both return only once every thread waiting on one of its signals has run up to its next wait
    (or has ended), so what those threads did at the new time is done when the test looks. Start
    such a thread with :meth:`start`, which returns once the thread waits for the first time.
    The wall clock moves with the monotonic one, ``wall_s - monotonic_s`` apart.
    """

    def __init__(self, monotonic_s: float = 0.0, wall_s: float = 1_700_000_000.0) -> None:
        self._now = monotonic_s
        self._wall_offset = wall_s - monotonic_s
        self._changed = threading.Condition()
        self._threads: set[threading.Thread] = set()  # started by start(), or blocked once on one of its signals
        self._waiting: dict[threading.Thread, float] = {}  # the threads blocked now, and their deadlines

    def monotonic(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self._wall_offset

    def stop_signal(self) -> StopSignal:
        return _ManualSignal(self)

    def start(self, thread: threading.Thread) -> None:
        """Starts ``thread`` and returns once it waits on this clock (or has ended)."""
        with self._changed:
            self._threads.add(thread)
        thread.start()
        with self._changed:
            self._settle()

    def advance(self, seconds: float) -> None:
        """Moves time ``seconds`` on, deadline by deadline: each waiting thread wakes exactly at its deadline."""
        target = self._now + seconds
        with self._changed:
            self._settle()
            while (due := min(self._waiting.values(), default=target)) < target:
                self._move_to(due)
            self._move_to(target)

    def jump(self, seconds: float) -> None:
        """Moves time ``seconds`` on at once: the threads whose deadlines it passes all wake late, at the new time."""
        with self._changed:
            self._settle()
            self._move_to(self._now + seconds)

    def _move_to(self, now: float) -> None:
        """Sets the time, wakes the threads now due and waits until they wait again (caller holds the lock)."""
        self._now = max(self._now, now)
        for thread, deadline in list(self._waiting.items()):
            if deadline <= self._now:
                del self._waiting[thread]  # running from now on, until its next wait
        self._changed.notify_all()
        self._settle()

    def _settle(self) -> None:
        """Until no thread of this clock runs: each waits, or has ended (caller holds the lock)."""
        while any(thread.is_alive() and thread not in self._waiting for thread in self._threads):
            self._changed.wait(_POLL_S)  # woken when a thread waits; the timeout only notices one that ended

    def _wait(self, signal: _ManualSignal, deadline_s: float) -> bool:
        thread = threading.current_thread()
        with self._changed:
            while not signal.is_set and self._now < deadline_s:
                self._threads.add(thread)  # from its first blocking wait on, advance() and jump() wait for it
                signal.waiter = thread
                self._waiting[thread] = deadline_s
                self._changed.notify_all()
                self._changed.wait()
            self._waiting.pop(thread, None)
            signal.waiter = None
            return signal.is_set

    def _set(self, signal: _ManualSignal) -> None:
        with self._changed:
            signal.is_set = True
            if signal.waiter is not None:
                self._waiting.pop(signal.waiter, None)
            self._changed.notify_all()


class _ManualSignal:
    """A :class:`ManualClock`'s stop signal: its state is kept under the clock's lock."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.is_set = False
        self.waiter: threading.Thread | None = None

    def set(self) -> None:
        self.clock._set(self)

    def wait_until(self, deadline_s: float) -> bool:
        return self.clock._wait(self, deadline_s)
