"""Store maintenance in the background of a long-lived trainmon process.

Every running job's supervisor keeps a :class:`Maintainer`: a daemon thread that, on its own
connection to the store, seals still chunks, rolls finished periods up and expires what the
retention policy drops (:func:`trainmon.store.series.maintain`) once a minute. When several jobs
run, the store's lease lets one of them do it at a time; the others find it taken and wait for
the next minute. ``trainmon maintain`` runs one pass by hand.
"""

from __future__ import annotations

import threading

from ..errors import TrainmonError
from ..store import Store, open_store
from ..store.rows import Maintenance

EVERY_S = 60.0
FIRST_AFTER_S = 5.0


class Maintainer:
    def __init__(self, store: Store, *, every_s: float = EVERY_S, first_after_s: float = FIRST_AFTER_S) -> None:
        self._home, self._url = store.home, store.database_url or ""
        self._retention = store.retention
        self._every_s, self._first_after_s = every_s, first_after_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainmon-maintenance", daemon=True)
        self.error: Exception | None = None  # the last pass's failure, if it failed
        self.passes: list[Maintenance] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        if self._stop.wait(self._first_after_s):
            return
        try:
            store = open_store(self._home, database_url=self._url, retention=self._retention)
        except TrainmonError as exc:
            self.error = exc
            return
        try:
            while True:
                try:
                    self.passes.append(store.maintain())
                    del self.passes[:-10]
                    self.error = None
                except Exception as exc:  # a full disk, a lost server, a bug: the job goes on; try again
                    self.error = exc
                if self._stop.wait(self._every_s):
                    return
        finally:
            store.close()
