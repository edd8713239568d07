"""Store maintenance and alarm evaluation in the background of a long-lived trainmon process.

``trainmon server`` and every running job's supervisor keep a :class:`Maintainer`: a daemon thread
that, on its own connection to the store,

- seals still chunks, rolls finished periods up and expires what the retention policy drops
  (:func:`trainmon.store.series.upkeep.maintain`) once a minute. When several processes run, the store's
  lease lets one of them do it at a time; the others find it taken and wait for the next minute;
- seals the chunks of the series writes keep busy every 5 s (:func:`trainmon.store.series.upkeep.seal_busy`),
  so that a running job's recent points are a few chunks to read, not hundreds;
- evaluates the CloudWatch alarms that are due every 10 s, when its caller gives it the alarm pass
  (``alarm_pass``: ``trainmon server`` gives :func:`trainmon.api.alarms.evaluate_alarms`): each
  alarm once a minute, or every 10 s for a high-resolution period, as CloudWatch does. Each
  alarm's slot is claimed in the store, so however many processes evaluate, it is evaluated once.
  The pass is the operations layer's (alarms are computed as GetMetricData computes them), handed
  down to this layer as a function, and run on the maintainer's thread.

A process that writes PutMetricData's datapoints needs one too, or a script that only puts would
leave its data unsealed and never rolled up: the operation calls :func:`keep_maintained`, which
starts a maintainer (without alarms: those stay the servers') for the store's database unless one
runs in the process already (every maintainer started is known here, by database).

Time comes from the :class:`~trainmon.clock.Clock` the maintainer is given: with a
:class:`~trainmon.clock.ManualClock` (``clock.start(maintainer)``), a test moves time and finds
each pass done when ``advance`` returns. ``trainmon maintain`` runs one maintenance pass by hand.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Protocol

from ... import config
from ...clock import REAL_CLOCK, Clock
from ...errors import TrainmonError
from ...store import Store, open_store
from ...store.rows import Maintenance

EVERY_S = 60.0
SEAL_BUSY_EVERY_S = 5.0
ALARMS_EVERY_S = 10.0
FIRST_AFTER_S = 5.0
KEPT_PASSES = 10

_running: dict[str, Maintainer] = {}  # database -> the maintainer of this process that keeps it
_running_lock = threading.RLock()  # taken again by Maintainer.start when keep_maintained starts one


class PassDone(Protocol):
    """What the maintainer reads of an alarm pass's report: how many alarm actions it handed to
    :mod:`trainmon.runtime.watch.notify` (their history is written once they end: the maintainer waits
    for them before it closes its store)."""

    actions: int


def keep_maintained(store: Store) -> Maintainer:
    """The maintainer this process runs for ``store``'s database: the one running, else a new one
    (started on the store's clock, alarms left to servers). Cheap when one runs: a lookup."""
    running = _running.get(store.database_key)
    if running is not None and running.is_alive():
        return running
    with _running_lock:
        running = _running.get(store.database_key)
        if running is not None and running.is_alive():
            return running
        maintainer = Maintainer(store, clock=store.clock)
        store.clock.start(maintainer)
        return maintainer


def running_for(store: Store) -> Maintainer | None:
    """The maintainer this process runs for ``store``'s database, if any."""
    running = _running.get(store.database_key)
    return running if running is not None and running.is_alive() else None


class Maintainer(threading.Thread):
    def __init__(self, store: Store, *, every_s: float = EVERY_S, first_after_s: float = FIRST_AFTER_S,
                 alarm_pass: Callable[[Store, float], PassDone] | None = None,
                 alarms_every_s: float = ALARMS_EVERY_S, clock: Clock = REAL_CLOCK) -> None:
        super().__init__(name="trainmon-maintenance", daemon=True)
        self._home, self._url = store.home, store.database_url or ""
        self._database = store.database_key
        self._retention = store.retention
        self._every_s, self._first_after_s, self._alarms_every_s = every_s, first_after_s, alarms_every_s
        self._alarm_pass = alarm_pass  # the server's maintainer evaluates alarms; a job's does not (docs/metrics.md)
        self._clock = clock
        self._stop_requested = clock.stop_signal()
        self.error: Exception | None = None  # the last maintenance pass's failure, if it failed
        self.alarm_error: Exception | None = None  # the last alarm pass's failure, if it failed
        self.passes: list[Maintenance] = []
        self.sealed_busy = 0  # points sealed between passes, for the series writes keep busy
        self.alarm_passes: list[PassDone] = []
        self._delivered = 0  # alarm actions handed to trainmon.runtime.watch.notify

    def start(self) -> None:
        """Starts the thread, known from now on as this process's maintainer of its database
        (unless another runs already)."""
        with _running_lock:
            running = _running.get(self._database)
            if running is None or running is self or not running.is_alive():
                _running[self._database] = self
        super().start()

    def stop(self) -> None:
        """Ends the thread; the alarm actions it started get their chance to finish (at most 10 s)."""
        self._stop_requested.set()
        if self.is_alive():
            self.join()
        self._forget()

    def _forget(self) -> None:
        with _running_lock:
            if _running.get(self._database) is self:
                del _running[self._database]

    def run(self) -> None:
        clock = self._clock
        if self._stop_requested.wait_until(clock.monotonic() + self._first_after_s):
            return
        if not self._url and not config.database_path(self._home).exists():
            return  # its data directory was removed meanwhile: nothing to maintain, and none to make
        try:
            store = open_store(self._home, database_url=self._url, retention=self._retention)
        except TrainmonError as exc:
            self.error = exc
            return
        try:
            next_maintenance = next_seal = clock.monotonic()
            alarm_pass = self._alarm_pass
            next_alarms = next_maintenance if alarm_pass is not None else math.inf
            while True:
                now = clock.monotonic()
                if alarm_pass is not None and now >= next_alarms:
                    self._evaluate(store, alarm_pass)
                    next_alarms = now + self._alarms_every_s
                if now >= next_maintenance:
                    self._maintain(store)
                    next_maintenance, next_seal = now + self._every_s, now + SEAL_BUSY_EVERY_S
                elif now >= next_seal:
                    self._seal_busy(store)
                    next_seal = now + SEAL_BUSY_EVERY_S
                if self._stop_requested.wait_until(min(next_alarms, next_maintenance, next_seal)):
                    return
        finally:
            if self._delivered:  # their history items are written to this store once they end
                from . import notify

                notify.flush()
            store.close()

    def _maintain(self, store: Store) -> None:
        try:
            self.passes.append(store.maintain())
            del self.passes[:-KEPT_PASSES]
            self.error = None
        except Exception as exc:  # a full disk, a lost server, a bug: the job goes on; try again
            self.error = exc

    def _seal_busy(self, store: Store) -> None:
        try:
            self.sealed_busy += store.seal_busy().sealed_points
        except Exception as exc:  # as above (the minute's pass clears it when it succeeds)
            self.error = exc

    def _evaluate(self, store: Store, alarm_pass: Callable[[Store, float], PassDone]) -> None:
        try:
            done = alarm_pass(store, self._clock.wall())
            self._delivered += done.actions
            self.alarm_passes.append(done)
            del self.alarm_passes[:-KEPT_PASSES]
            self.alarm_error = None
        except Exception as exc:  # as above: the next pass tries again
            self.alarm_error = exc
